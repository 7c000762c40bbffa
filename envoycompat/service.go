package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/ratelog"
)

// Options configures a Service: each field is the envoyproxy/ratelimit
// setting named in its comment. The zero value of every field but Store is
// that setting's zero, not its default: Settings.Options fills the
// defaults.
type Options struct {
	// Store holds the counters (required).
	Store Store
	// CacheKeyPrefix starts every counter key (CACHE_KEY_PREFIX).
	CacheKeyPrefix string
	// ExpirationJitterMax adds a random [0, ExpirationJitterMax) whole
	// seconds to each counter's time to live
	// (EXPIRATION_JITTER_MAX_SECONDS).
	ExpirationJitterMax time.Duration
	// LocalCacheBytes, when not 0, remembers counters found over their
	// limit until their window ends, answering them without the store
	// (LOCAL_CACHE_SIZE_IN_BYTES); below MinLocalCacheBytes (negative
	// too) it is MinLocalCacheBytes, as in theirs.
	LocalCacheBytes int
	// NearLimitRatio is the share of a limit above which hits count as
	// near_limit (NEAR_LIMIT_RATIO); outside 0..1 (NaN too) none does.
	NearLimitRatio float32
	// StopIncrementWhenOverLimit stops counting a request in every
	// descriptor but the ones it takes over their limit
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	StopIncrementWhenOverLimit bool
	// GlobalShadowMode answers OK overall whatever the descriptors say
	// (SHADOW_MODE).
	GlobalShadowMode bool
	// GlobalQuotaMode treats every descriptor as quota_mode (QUOTA_MODE).
	GlobalQuotaMode bool
	// ResponseHeaders adds the limit, remaining and reset headers of the
	// descriptor with the least remaining, or of the last rate limit
	// descriptor over its limit, as envoyproxy/ratelimit does (so with
	// several over, the reset may be the shortest of their waits)
	// (LIMIT_RESPONSE_HEADERS_ENABLED),
	// named LimitHeader, RemainingHeader and ResetHeader
	// (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string
	// DynamicMetadata adds the request and the metadata of the passed
	// descriptors to the answer's dynamic_metadata
	// (RESPONSE_DYNAMIC_METADATA).
	DynamicMetadata bool
	// MaxDescriptors is the most descriptors one request may carry,
	// repeats included (FLOODGATE_MAX_DESCRIPTORS, Floodgate's own:
	// envoyproxy/ratelimit has no bound). A request of more is refused
	// before anything is matched or counted: gRPC INVALID_ARGUMENT, POST
	// /json 400. Every descriptor costs a Redis key written and memory;
	// without a bound, 6 requests of 150,000 descriptors took the service
	// from 32 to 563 MB. 0 (or negative): no bound; Settings.Options
	// fills DefaultMaxDescriptors.
	MaxDescriptors int
	// Metrics counts decisions; nil counts nothing.
	Metrics *Metrics
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Log receives store errors (at error level) and refused requests,
	// the service errors (at warn level, with the client's address, the
	// domain and why: an empty domain, no descriptors, more than
	// MaxDescriptors, no configuration loaded), each kind at most one
	// line per LogEvery (the next one says how many were suppressed): in
	// a Redis outage every request fails, and a misconfigured client
	// sends every request wrong. Nil logs nothing.
	Log *slog.Logger
	// LogEvery is the least time between two lines of a kind; default
	// 10s.
	LogEvery time.Duration
}

// Service answers Envoy's ShouldRateLimit as envoyproxy/ratelimit does,
// with its fixed windows and counter keys. It is safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer

	opts  Options
	log   *ratelog.Log // opts.Log, rate-limited; nil when it is nil
	cfg   atomic.Pointer[Config]
	local *overCache
	rndMu sync.Mutex
	rnd   *rand.Rand
}

// DefaultMaxDescriptors is the default of Options.MaxDescriptors, and
// MaxMaxDescriptors the largest FLOODGATE_MAX_DESCRIPTORS taken. Envoy
// sends one descriptor per rate_limit action list that applies to a
// request, a handful in real configurations.
const (
	DefaultMaxDescriptors = 1000
	MaxMaxDescriptors     = 1_000_000
)

// RequestError is a request envoyproxy/ratelimit refuses (their service
// error): an empty domain, no descriptors, or no configuration loaded.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

// NewService returns a Service without configuration: until SetConfig,
// every request is refused with "no rate limit configuration loaded".
func NewService(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("envoycompat: Options.Store is required")
	}
	if opts.ExpirationJitterMax < 0 {
		return nil, fmt.Errorf("envoycompat: ExpirationJitterMax %v is negative", opts.ExpirationJitterMax)
	}
	if opts.LogEvery < 0 {
		return nil, fmt.Errorf("envoycompat: LogEvery %v is negative", opts.LogEvery)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LogEvery == 0 {
		opts.LogEvery = 10 * time.Second
	}
	s := &Service{opts: opts, local: newOverCache(opts.LocalCacheBytes), rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	if opts.Log != nil {
		s.log = ratelog.New(opts.Log, opts.LogEvery)
	}
	return s, nil
}

// SetConfig makes cfg the configuration later requests are decided under.
func (s *Service) SetConfig(cfg *Config) { s.cfg.Store(cfg) }

// Config returns the configuration in force; nil before SetConfig.
func (s *Service) Config() *Config { return s.cfg.Load() }

// Register registers s on a gRPC server.
func (s *Service) Register(gs *grpc.Server) { rlspb.RegisterRateLimitServiceServer(gs, s) }

// ShouldRateLimit implements the RateLimitService API. A *RequestError or
// a store error is returned with gRPC code Unknown, as theirs: a store
// error that ended at the request's deadline (REDIS_TIMEOUT) too, which
// grpc-go would otherwise answer DeadlineExceeded. A request of more than
// Options.MaxDescriptors descriptors, which theirs has no bound for, gets
// InvalidArgument.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	// The client's address is read from ctx only when a refusal is
	// logged (logRefused): formatting it for every call cost an
	// allocation on the decision path.
	if err := s.checkCount(ctx, "", req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := s.shouldRateLimit(ctx, "", req)
	if err != nil {
		var re *RequestError
		if !errors.As(err, &re) {
			return resp, status.Error(codes.Unknown, err.Error())
		}
	}
	return resp, err
}

// errTooManyDescriptors is the error of a request of more than
// Options.MaxDescriptors descriptors.
var errTooManyDescriptors = errors.New("envoycompat: too many descriptors")

// checkCount returns an error wrapping errTooManyDescriptors, saying the
// bound, when req's descriptors are more than Options.MaxDescriptors
// (counted as a service error in the metrics, as theirs counts a refused
// request, and logged as a refused request of client). The gRPC codec
// and POST /json decode one past the bound at most: the count is then at
// least what was sent.
func (s *Service) checkCount(ctx context.Context, client string, req *rlspb.RateLimitRequest) error {
	n := len(req.GetDescriptors())
	if max := s.opts.MaxDescriptors; max <= 0 || n <= max {
		return nil
	}
	if m := s.opts.Metrics; m != nil {
		m.serviceError.Inc()
	}
	err := fmt.Errorf("%w: at least %d descriptors (repeats included): a request carries at most %d (FLOODGATE_MAX_DESCRIPTORS)", errTooManyDescriptors, n, s.opts.MaxDescriptors)
	s.logRefused(ctx, client, req, err)
	return err
}

// maxLoggedDomain is the most bytes of a refused request's domain its
// log line quotes: the domain is the client's, of any length.
const maxLoggedDomain = 256

// logRefused logs a request refused as a service error (the client's
// doing, or no configuration loaded), at warn level and at most one line
// per Options.LogEvery, so that an operator seeing
// floodgate_envoy_should_rate_limit_errors_total{err_type="service_error"}
// rise can tell which client sends what, and why it is refused.
// envoyproxy/ratelimit logs these at debug level only.
func (s *Service) logRefused(ctx context.Context, client string, req *rlspb.RateLimitRequest, err error) {
	if s.log == nil {
		return
	}
	if p, ok := peer.FromContext(ctx); client == "" && ok && p.Addr != nil {
		client = p.Addr.String() // a gRPC call's
	}
	s.log.Log(ctx, slog.LevelWarn, "refused request", "ShouldRateLimit: request refused (service_error)",
		"client", client, "domain", clip.Text(req.GetDomain(), maxLoggedDomain), "descriptors", len(req.GetDescriptors()), "error", err)
}

// shouldRateLimit is ShouldRateLimit with the store's error as it is,
// for POST /json. client is the caller's address for the log (empty: a
// gRPC call's, read from ctx if a line is written).
func (s *Service) shouldRateLimit(ctx context.Context, client string, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp, err := s.decide(ctx, req)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The client went away while its update waited to be sent, and
		// the store dropped it unsent: nobody reads this answer, and
		// Redis did not fail, so it is neither a redis_error nor a store
		// error line (counted as one, clients hanging up on a slow Redis
		// looked like Redis failing).
		return resp, err
	}
	if err != nil {
		var re *RequestError
		isReq := errors.As(err, &re)
		if m := s.opts.Metrics; m != nil {
			if isReq {
				m.serviceError.Inc()
			} else {
				m.redisError.Inc()
			}
		}
		switch {
		case isReq:
			s.logRefused(ctx, client, req, err)
		case s.log != nil:
			s.log.Error(ctx, "store error", "ShouldRateLimit: store error", "domain", req.GetDomain(), "error", err)
		}
	}
	return resp, err
}

func (s *Service) decide(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, &RequestError{"rate limit domain must not be empty"}
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, &RequestError{"rate limit descriptor list must not be empty"}
	}
	for i, d := range req.GetDescriptors() {
		// A counter is a Redis integer: INCRBY takes at most 2^63-1.
		if h := d.GetHitsAddend(); h != nil && h.GetValue() > math.MaxInt64 {
			return nil, &RequestError{fmt.Sprintf("descriptor %d: hits_addend %d above the maximum %d", i, h.GetValue(), int64(math.MaxInt64))}
		}
	}
	cfg := s.cfg.Load()
	if cfg == nil {
		return nil, &RequestError{"no rate limit configuration loaded"}
	}
	n := len(req.GetDescriptors())
	if _, ok := cfg.domains[req.GetDomain()]; !ok && s.opts.Metrics != nil {
		for range n { // theirs counts each descriptor looked up
			s.opts.Metrics.domainNotFound(req.GetDomain())
		}
	}
	limits := make([]*Limit, n)
	unlimited := make([]bool, n)
	replaced := map[string]bool{}
	for i, d := range req.GetDescriptors() {
		l := cfg.Match(req.GetDomain(), d)
		if l == nil {
			continue
		}
		for _, r := range l.Replaces {
			replaced[r] = true
		}
		if l.Unlimited {
			unlimited[i] = true
			continue
		}
		limits[i] = l
	}
	for i, l := range limits {
		if l != nil && l.Name != "" && replaced[l.Name] {
			limits[i] = nil
		}
	}
	statuses, err := s.doLimit(ctx, req, limits)
	if err != nil {
		return nil, err
	}
	return s.answer(req, limits, unlimited, statuses), nil
}

// answer assembles the response from the descriptor statuses.
func (s *Service) answer(req *rlspb.RateLimitRequest, limits []*Limit, unlimited []bool, statuses []*rlspb.RateLimitResponse_DescriptorStatus) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(statuses))}
	minRemaining := uint32(math.MaxUint32)
	var closest *rlspb.RateLimitResponse_DescriptorStatus
	var passed []int
	failedRate, failedQuota, quota := 0, 0, 0
	for i, st := range statuses {
		if s.opts.ResponseHeaders && st.GetCurrentLimit() != nil && st.GetLimitRemaining() < minRemaining {
			closest, minRemaining = st, st.GetLimitRemaining()
		}
		if unlimited[i] {
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		resp.Statuses[i] = st
		isQuota := s.opts.GlobalQuotaMode || (limits[i] != nil && limits[i].Quota)
		if st.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			if isQuota {
				failedQuota++
			} else {
				failedRate++
				closest, minRemaining = st, 0
			}
		} else {
			passed = append(passed, i)
		}
		if isQuota {
			quota++
		}
	}
	code := rlspb.RateLimitResponse_OK
	if failedRate > 0 || (quota > 0 && quota == failedQuota) {
		code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.ResponseHeaders && closest != nil {
		resp.ResponseHeadersToAdd = []*core.HeaderValue{
			{Key: s.opts.LimitHeader, Value: strconv.FormatUint(uint64(closest.GetCurrentLimit().GetRequestsPerUnit()), 10)},
			{Key: s.opts.RemainingHeader, Value: strconv.FormatUint(uint64(closest.GetLimitRemaining()), 10)},
			{Key: s.opts.ResetHeader, Value: strconv.FormatInt(resetSeconds(closest.GetCurrentLimit().GetUnit(), s.opts.Now().Unix()), 10)},
		}
	}
	if code == rlspb.RateLimitResponse_OVER_LIMIT && s.opts.GlobalShadowMode {
		code = rlspb.RateLimitResponse_OK
		if s.opts.Metrics != nil {
			s.opts.Metrics.globalShadow.Inc()
		}
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, passed, limits)
	}
	resp.OverallCode = code
	return resp
}

// unitSeconds is the length of a unit in seconds (a month is 30 days, a
// year 365), 0 for UNKNOWN.
func unitSeconds(u rlspb.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return 86400
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400
	}
	return 0
}

// resetSeconds is the whole seconds until the current window of unit ends.
func resetSeconds(u rlspb.RateLimitResponse_RateLimit_Unit, unix int64) int64 {
	d := unitSeconds(u)
	if d == 0 {
		return 0
	}
	return d - unix%d
}

// MaxHitsAddend is the most a descriptor adds to its counter in one
// request: a larger hits_addend counts as MaxHitsAddend. Every limit
// (requests_per_unit, a uint32) is far below it, so the answer is the
// same, and the counters stay exact (see MaxCounter).
const MaxHitsAddend = 1 << 40

// MaxCounter is where a counter saturates: an update that would take it
// past MaxCounter sets it to MaxCounter (incr.lua, MemoryStore), so that
// no request can make a counter fail every later update of its window
// (Redis refuses an INCRBY past 2^63-1, and the script's Lua numbers are
// exact only up to 2^53).
const MaxCounter = 1 << 52

// hitsAddends returns each descriptor's cost: its own hits_addend when
// set (0 included), else the request's, at least 1; at most
// MaxHitsAddend.
func hitsAddends(req *rlspb.RateLimitRequest) []uint64 {
	out := make([]uint64, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		if h := d.GetHitsAddend(); h != nil {
			out[i] = min(h.GetValue(), MaxHitsAddend)
		} else {
			out[i] = max(1, uint64(req.GetHitsAddend()))
		}
	}
	return out
}

// CounterKey returns the counter key of a descriptor under l at unix
// time now: the prefix, the domain, each entry as key_value_ (a
// share_threshold wildcard standing for the value), and the start of the
// current window in Unix seconds, as envoyproxy/ratelimit builds it.
func CounterKey(prefix, domain string, entries []Entry, l *Limit, now int64) string {
	d := unitSeconds(l.Proto.GetUnit())
	var num [20]byte
	window := strconv.AppendInt(num[:0], now/d*d, 10)
	n := len(prefix) + len(domain) + 1 + len(window)
	for i, e := range entries {
		n += len(e.Key) + len(entryValue(l, i, e)) + 2
	}
	var b strings.Builder
	b.Grow(n) // the one allocation
	b.WriteString(prefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range entries {
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(entryValue(l, i, e))
		b.WriteByte('_')
	}
	b.Write(window)
	return b.String()
}

// entryValue is the value entry i contributes to l's counter key: its
// own, or the share_threshold pattern that shares one counter.
func entryValue(l *Limit, i int, e Entry) string {
	if i < len(l.sharePattern) && l.sharePattern[i] != "" {
		return l.sharePattern[i]
	}
	return e.Value
}

// Entry is one key/value pair of a request descriptor.
type Entry struct{ Key, Value string }
