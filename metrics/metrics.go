// Package metrics exports Floodgate's Prometheus metrics:
//
//	rate_limit_allowed_total{policy,route,tier}     counter
//	rate_limit_denied_total{policy,route,tier}      counter
//	rate_limit_redis_latency_seconds                histogram of primary store calls
//	rate_limit_redis_errors_total                   counter of failed primary store calls
//	rate_limit_fallback_total{mode,reason}          counter of degraded decisions
//	rate_limit_breaker_state{partition}             gauge: 0 closed, 1 half-open, 2 open
//	rate_limit_clock_skew_seconds                   gauge: Redis's time minus the local clock
//	rate_limit_clock_sync_rtt_seconds               gauge: round trip of that measurement
//
// Label values come from configuration (policy names, route patterns, tier
// names), never from requests: a raw user id or IP as a label would create
// a series per user. Each label is capped at MaxLabelValues distinct values
// besides, so a misconfiguration cannot explode the series count; extra
// values are reported as "other". The identities being denied are tracked
// instead in a bounded top-K (package topk), read with TopDenied.
//
// A Metrics is registered on the Registerer given to New; nothing is
// registered globally. It implements fallback.Observer and
// clocksync.Observer.
package metrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/nilcheck"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
	"github.com/floodgate-rl/floodgate/topk"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrInvalidOptions reports Options (or a Registerer) that New cannot use.
var ErrInvalidOptions = errors.New("metrics: invalid options")

// Other is the label value that replaces values beyond MaxLabelValues, and
// None the one that replaces empty values.
const (
	Other = "other"
	None  = "none"
)

// DefaultLatencyBuckets are the latency histogram's bucket bounds, in
// seconds: fine below the 50 ms alert threshold, coarse above.
func DefaultLatencyBuckets() []float64 {
	return []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1}
}

// Options configures a Metrics. The zero value is ready to use.
type Options struct {
	// ConstLabels are added to every metric, e.g. {"service": "api"}.
	ConstLabels prometheus.Labels
	// LatencyBuckets overrides DefaultLatencyBuckets (seconds, increasing).
	LatencyBuckets []float64
	// MaxLabelValues caps the distinct values of each of the policy, route
	// and tier labels. Default 200; at most 10,000.
	MaxLabelValues int
	// TopK configures the tracker of denied identities. Zero value:
	// topk's defaults (100 identities, counted since start).
	TopK topk.Options
}

// Labels are the configuration-derived labels of a decision. Empty values
// are reported as "none".
type Labels struct {
	// Policy is the policy's name, e.g. "api-per-user".
	Policy string
	// Route is the route pattern from configuration, e.g. "/v1/chat", never
	// the raw request path.
	Route string
	// Tier is the caller's tier from configuration, e.g. "free".
	Tier string
}

// Metrics records Floodgate's metrics. It is safe for concurrent use.
type Metrics struct {
	allowed, denied *prometheus.CounterVec
	latency         prometheus.Histogram
	redisErrors     prometheus.Counter
	fallbacks       *prometheus.CounterVec
	breaker         *prometheus.GaugeVec
	skew, rtt       prometheus.Gauge
	denials         *topk.Tracker

	maxValues int
	mu        sync.RWMutex
	seen      [3]map[string]struct{} // accepted values of policy, route, tier
	// counters holds the allowed ([0]) and denied ([1]) counter of each
	// Labels seen, so that a decision costs a map read, not a label
	// resolution and a lookup in the CounterVec (at most maxCached each).
	counters [2]map[Labels]prometheus.Counter
}

// maxCached bounds the counters Metrics keeps resolved per outcome.
const maxCached = 4096

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil Registerer", ErrInvalidOptions)
	}
	if opts.MaxLabelValues < 0 || opts.MaxLabelValues > 10_000 {
		return nil, fmt.Errorf("%w: max label values %d out of range 0..10000", ErrInvalidOptions, opts.MaxLabelValues)
	}
	if opts.MaxLabelValues == 0 {
		opts.MaxLabelValues = 200
	}
	buckets := opts.LatencyBuckets
	if buckets == nil {
		buckets = DefaultLatencyBuckets()
	}
	for i, b := range buckets {
		if b <= 0 || b != b || (i > 0 && b <= buckets[i-1]) {
			return nil, fmt.Errorf("%w: latency buckets %v must be positive and increasing", ErrInvalidOptions, buckets)
		}
	}
	denials, err := topk.New(opts.TopK)
	if err != nil {
		return nil, fmt.Errorf("%w: top-K: %w", ErrInvalidOptions, err)
	}
	cl := opts.ConstLabels
	decision := []string{"policy", "route", "tier"}
	m := &Metrics{
		allowed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_allowed_total", Help: "Requests admitted by the rate limiter.", ConstLabels: cl,
		}, decision),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_denied_total", Help: "Requests denied by the rate limiter (whether the caller answered them 429 or not).", ConstLabels: cl,
		}, decision),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rate_limit_redis_latency_seconds", Help: "Duration of rate limit decisions on the primary store (Redis), failures included.",
			ConstLabels: cl, Buckets: append([]float64(nil), buckets...),
		}),
		redisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_redis_errors_total", Help: "Rate limit decisions the primary store (Redis) failed.", ConstLabels: cl,
		}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_fallback_total", Help: "Decisions taken by a failure mode instead of the primary store, by mode and reason.", ConstLabels: cl,
		}, []string{"mode", "reason"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_breaker_state", Help: "Circuit breaker in front of the primary store, per partition (Redis primary): 0 closed, 1 half-open, 2 open.", ConstLabels: cl,
		}, []string{"partition"}),
		skew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rate_limit_clock_skew_seconds", Help: "Measured offset of Redis's clock from this instance's (Redis minus local), applied to timestamps.", ConstLabels: cl,
		}),
		rtt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rate_limit_clock_sync_rtt_seconds", Help: "Round trip of the TIME sample the clock skew comes from; the skew is accurate to half of it.", ConstLabels: cl,
		}),
		denials:   denials,
		maxValues: opts.MaxLabelValues,
	}
	for i := range m.seen {
		m.seen[i] = map[string]struct{}{}
	}
	for i := range m.counters {
		m.counters[i] = map[Labels]prometheus.Counter{}
	}
	// Create every fallback series at zero, so that rate() and increase()
	// see the first fallback instead of a series appearing from nothing.
	for _, mode := range []fallback.Mode{fallback.ModeLocal, fallback.ModeOpen, fallback.ModeClosed} {
		for _, r := range fallback.Reasons() {
			m.fallbacks.WithLabelValues(mode.String(), r.String())
		}
	}
	collectors := []prometheus.Collector{m.allowed, m.denied, m.latency, m.redisErrors, m.fallbacks, m.breaker, m.skew, m.rtt}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			// Leave reg as it was: a second New on the same registry
			// fails without half-registering.
			for _, done := range collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("%w: registering: %w", ErrInvalidOptions, err)
		}
	}
	return m, nil
}

// Decision records one decision: it counts it as allowed or denied under l
// and, when denied, adds identity (a user id, API key or IP, which is never
// a label) to the top-K of denied identities.
func (m *Metrics) Decision(l Labels, identity string, allowed bool) {
	if allowed {
		m.counter(0, m.allowed, l).Inc()
		return
	}
	m.counter(1, m.denied, l).Inc()
	m.denials.Add(identity, 1)
}

// counter returns vec's counter for l, resolved once (outcome 0 allowed,
// 1 denied).
func (m *Metrics) counter(outcome int, vec *prometheus.CounterVec, l Labels) prometheus.Counter {
	m.mu.RLock()
	c := m.counters[outcome][l]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	c = vec.WithLabelValues(m.label(0, l.Policy), m.label(1, l.Route), m.label(2, l.Tier))
	m.mu.Lock()
	if len(m.counters[outcome]) < maxCached {
		m.counters[outcome][l] = c
	}
	m.mu.Unlock()
	return c
}

// label returns v, "none" for an empty v, or "other" once label i has
// MaxLabelValues distinct values and v is not one of them.
func (m *Metrics) label(i int, v string) string {
	if v == "" {
		return None
	}
	m.mu.RLock()
	_, ok := m.seen[i][v]
	m.mu.RUnlock()
	if ok {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.seen[i][v]; ok {
		return v
	}
	if len(m.seen[i]) >= m.maxValues {
		return Other
	}
	m.seen[i][v] = struct{}{}
	return v
}

// TopDenied returns up to n of the most denied identities, most denied
// first, with their counts and error bounds (see topk.Item). n <= 0
// returns all tracked. Meant for an admin endpoint.
func (m *Metrics) TopDenied(n int) []topk.Item { return m.denials.Top(n) }

// ObservePrimary implements fallback.Observer: it records the call's
// latency and counts it in rate_limit_redis_errors_total if it failed.
func (m *Metrics) ObservePrimary(d time.Duration, err error) {
	m.latency.Observe(d.Seconds())
	if err != nil {
		m.redisErrors.Inc()
	}
}

// ObserveFallback implements fallback.Observer.
func (m *Metrics) ObserveFallback(mode fallback.Mode, r fallback.Reason) {
	m.fallbacks.WithLabelValues(mode.String(), r.String()).Inc()
}

// ObserveBreaker implements fallback.Observer.
func (m *Metrics) ObserveBreaker(partition string, s fallback.BreakerState) {
	m.breaker.WithLabelValues(partition).Set(float64(s))
}

// ForgetBreaker implements fallback.BreakerForgetter: the breaker of a
// partition that is gone (a Cluster primary no longer in the slot map) has
// no series any more.
func (m *Metrics) ForgetBreaker(partition string) {
	m.breaker.DeleteLabelValues(partition)
}

// ObserveClock implements clocksync.Observer.
func (m *Metrics) ObserveClock(offset, rtt time.Duration) {
	m.skew.Set(offset.Seconds())
	m.rtt.Set(rtt.Seconds())
}

// TLSClientRefusedMetric is the name of the counter
// RegisterTLSClientRefused registers.
const TLSClientRefusedMetric = "floodgate_tls_client_certificates_refused_total"

// RegisterTLSClientRefused registers on reg a counter of the client
// certificates the listeners refused (mutual TLS), read from refused at
// each scrape.
func RegisterTLSClientRefused(reg prometheus.Registerer, refused func() uint64) error {
	if reg == nil || refused == nil {
		return fmt.Errorf("%w: RegisterTLSClientRefused needs a registerer and a refused function", ErrInvalidOptions)
	}
	return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: TLSClientRefusedMetric,
		Help: "Client certificates refused by the listeners (--tls-client-ca-file): not of the authorities, not for client authentication, or expired.",
	}, func() float64 { return float64(refused()) }))
}

// TLSExpiryMetric is the name of the gauge RegisterTLSExpiry registers.
const TLSExpiryMetric = "floodgate_tls_certificate_expiry_timestamp_seconds"

// RegisterTLSExpiry registers on reg a gauge of when the TLS certificate
// the listeners serve expires, in Unix seconds, read from notAfter at each
// scrape (the certificate may be reloaded meanwhile).
func RegisterTLSExpiry(reg prometheus.Registerer, notAfter func() time.Time) error {
	if reg == nil || notAfter == nil {
		return fmt.Errorf("%w: RegisterTLSExpiry needs a registerer and a notAfter function", ErrInvalidOptions)
	}
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: TLSExpiryMetric,
		Help: "When the TLS certificate served on the listeners (--tls-cert-file, reloaded when it changes) expires, in Unix seconds.",
	}, func() float64 { return float64(notAfter().Unix()) }))
}

// FallbackInstancesMetric is the name of the gauge
// RegisterFallbackInstances registers.
const FallbackInstancesMetric = "floodgate_fallback_instances"

// RegisterFallbackInstances registers on reg the gauge of what the local
// fallback of floodgate serve divides each limit by, read from divisor at
// each scrape.
func RegisterFallbackInstances(reg prometheus.Registerer, divisor func() int) error {
	if reg == nil || divisor == nil {
		return fmt.Errorf("%w: RegisterFallbackInstances needs a registerer and a divisor function", ErrInvalidOptions)
	}
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: FallbackInstancesMetric,
		Help: "What the local fallback divides each limit by: the live instance count (floodgate_instances_live, held for a TTL after Redis comes back) or --instances, whichever is larger.",
	}, func() float64 { return float64(divisor()) }))
}

// SplitReleaseFailuresMetric is the name of the counter
// RegisterSplitReleaseFailures registers.
const SplitReleaseFailuresMetric = "floodgate_split_release_failures_total"

// RegisterSplitReleaseFailures registers on reg the counter of the parts of
// split decisions (keys in several Redis Cluster slots) whose release
// failed, read from count at each scrape (redisstore.Store.ReleaseFailures).
func RegisterSplitReleaseFailures(reg prometheus.Registerer, count func() int64) error {
	if reg == nil || count == nil {
		return fmt.Errorf("%w: RegisterSplitReleaseFailures needs a registerer and a count function", ErrInvalidOptions)
	}
	return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: SplitReleaseFailuresMetric,
		Help: "Parts of decisions split over Redis Cluster slots whose release failed after another part denied the request or failed: their layers keep the charge of a request the store did not admit (a denial, or a failure answered by the fallback or a fail-closed policy) until their windows or periods end.",
	}, func() float64 { return float64(count()) }))
}

// Names of the metrics RegisterDenyCache registers.
const (
	DenyCacheAnswersMetric    = "floodgate_deny_cache_answers_total"
	DenyCacheEntriesMetric    = "floodgate_deny_cache_entries"
	DenyCacheEntriesMaxMetric = "floodgate_deny_cache_entries_max"
	DenyCacheEvictionsMetric  = "floodgate_deny_cache_evictions_total"
)

// DenyCache is what RegisterDenyCache reads at each scrape (a
// *denycache.Store): the decisions it answered without a Redis call, the
// entries it evicted while they still answered, and the denials it holds.
type DenyCache interface {
	Saved() uint64
	Evicted() uint64
	Len() int
}

// RegisterDenyCache registers on reg the metrics of serve's cache of
// denials (--deny-cache-entries, package denycache) c, whose most entries
// are most.
func RegisterDenyCache(reg prometheus.Registerer, c DenyCache, most int) error {
	if reg == nil || nilcheck.IsNil(c) {
		return fmt.Errorf("%w: RegisterDenyCache needs a registerer and a cache", ErrInvalidOptions)
	}
	for _, col := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: DenyCacheAnswersMetric,
			Help: "Decisions the cache of denials (serve --deny-cache-entries) answered without a Redis call, each a denial Redis would have repeated: one per check or ShouldRateLimit call, one per descriptor with --envoy-count-each-descriptor.",
		}, func() float64 { return float64(c.Saved()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: DenyCacheEvictionsMetric,
			Help: "Cached denials evicted for another key's while they still answered; one that keeps rising says --deny-cache-entries is too small for the identities denied at once.",
		}, func() float64 { return float64(c.Evicted()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: DenyCacheEntriesMetric,
			Help: "Denials the cache holds, lapsed ones not yet evicted included.",
		}, func() float64 { return float64(c.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: DenyCacheEntriesMaxMetric,
			Help: "The most denials the cache holds (--deny-cache-entries), in shards that each evict their least recently used entry once full, so eviction can begin below it.",
		}, func() float64 { return float64(most) }),
	} {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}

// RedisRestartsMetric is the name of the counter RegisterRedisRestarts
// registers.
const RedisRestartsMetric = "floodgate_redis_restarts_total"

// RedisRestartKinds are the values of RedisRestartsMetric's label kind:
// a restart (the same primary started again, not promoted: only what
// it loaded from disk), a failover (a replica promoted: what it
// replicated), a replacement (another server, not a replica: only what
// it loaded) and a resync (the same process, made a replica of another
// server and synced from it, or a replica promoted whose replication
// history is another server's: what that server held).
func RedisRestartKinds() []string { return []string{"restart", "failover", "replaced", "resync"} }

// RegisterRedisRestarts registers on reg the counter of the times
// floodgate serve found the Redis it decides on to be another server
// process than before (its run_id changed), or the same process with
// another server's data (a resync), labelled kind (each of
// RedisRestartKinds, every one exported from the start, at 0), read
// from count(kind) at each scrape. A change counts when it is first
// seen, also while the new process is still loading its data: its kind
// does not depend on what that process loaded.
func RegisterRedisRestarts(reg prometheus.Registerer, count func(kind string) int64) error {
	if reg == nil || count == nil {
		return fmt.Errorf("%w: RegisterRedisRestarts needs a registerer and a count function", ErrInvalidOptions)
	}
	for _, kind := range RedisRestartKinds() {
		err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        RedisRestartsMetric,
			Help:        "Times the Redis decided on (a single Redis, the primary behind Sentinel, or a Cluster primary) was found to be another server process than at the previous check (its run_id changed), or the same process with another server's data, by kind: restart (a new process at the primary's address: its counters, quotas and leases are only those it loaded at its start, none without persistence), failover (a replica promoted: INFO replication's master_replid2, for a single Redis or the Sentinel primary the old primary's master_replid when a previous check read it, with, for a single Redis or the Sentinel primary at the same address, an uptime longer than the time since the previous check, or on a Cluster listed by CLUSTER SLOTS as the old primary's replica; its counters are those it replicated, but for the last writes before the failover, older for a replica promoted back before it resynced), replaced (another server, not a replica: only those it loaded) or resync (another server's replication history since the previous check: the same run_id made a replica of another server and synced from it, promoted back or not, or a replica promoted whose master_replid2 is not the old primary's master_replid at the previous check; those that server held).",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, func() float64 { return float64(count(kind)) }))
		if err != nil {
			return err
		}
	}
	return nil
}

// MemoryStoreMetric is the name of the gauge of a store's entries that
// RegisterMemoryStore registers; MemoryStoreMaxMetric that of its bound.
const (
	MemoryStoreMetric    = "floodgate_memory_store_entries"
	MemoryStoreMaxMetric = "floodgate_memory_store_entries_max"
)

// RegisterMemoryStore registers on reg, labelled store, two gauges of an
// in-memory store of floodgate serve: the entries it holds, read from held
// at each scrape, and the most it may hold, most. Stores are ratelimit
// (the memstore of memory mode or of the local fallback, which evicts at
// its bound) and, in memory mode, quota_periods, quota_records and leases
// (which refuse).
func RegisterMemoryStore(reg prometheus.Registerer, store string, most int, held func() int) error {
	if reg == nil || store == "" || held == nil {
		return fmt.Errorf("%w: RegisterMemoryStore needs a registerer, a store name and a held function", ErrInvalidOptions)
	}
	labels := prometheus.Labels{"store": store}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        MemoryStoreMetric,
		Help:        "Entries the in-memory stores hold, by store: ratelimit (rate limit identities, in memory mode or the local fallback; at floodgate_memory_store_entries_max it evicts, see floodgate_memstore_evictions_total) and, in memory mode, quota_periods, quota_records (reservations and settlement outcomes), leases (at the max, operations needing one more answer 503). Expired entries not yet swept included.",
		ConstLabels: labels,
	}, func() float64 { return float64(held()) })); err != nil {
		return err
	}
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        MemoryStoreMaxMetric,
		Help:        "The most entries each in-memory store holds: --memory-max-keys (ratelimit), --memory-max-quota-periods, --memory-max-quota-records, --memory-max-leases.",
		ConstLabels: labels,
	}, func() float64 { return float64(most) }))
}

// The names of the gauges RegisterSentinels registers.
const (
	SentinelsMetric             = "floodgate_sentinels"
	SentinelsAnsweringMetric    = "floodgate_sentinels_answering"
	SentinelMajorityMetric      = "floodgate_sentinel_majority"
	SentinelUnknownMasterMetric = "floodgate_sentinel_unknown_master"
)

// RegisterSentinels registers on reg, labelled client (the Redis client
// they serve: "redis" for serve's; envoy-compat's "redis" and
// "redis_persecond"), four gauges of the sentinels a client made behind
// Sentinel asks for the primary, read from status at each scrape
// (sentinelfollow.Follower.Status): how many it asks (SentinelsMetric),
// how many answered the last round, every second
// (SentinelsAnsweringMetric), 1 when a majority of them named one primary
// in it, 0 otherwise (SentinelMajorityMetric), and 1 when a majority of
// them answered that they do not monitor the master, 0 otherwise
// (SentinelUnknownMasterMetric). While the majority gauge is 0 because
// they do not answer, the client goes on with the primary named last, and
// a failover is not followed; while the unknown-master gauge is 1, the
// primary is forgotten, and each new connection goes to the primary a
// sentinel still monitoring the master names, or fails when none does.
func RegisterSentinels(reg prometheus.Registerer, client string, status func() sentinelfollow.Status) error {
	if reg == nil || client == "" || status == nil {
		return fmt.Errorf("%w: RegisterSentinels needs a registerer, a client name and a status function", ErrInvalidOptions)
	}
	labels := prometheus.Labels{"client": client}
	for _, g := range []struct {
		name, help string
		value      func(sentinelfollow.Status) int
	}{
		{SentinelsMetric, "Sentinels the Redis client asks for the primary (--redis-sentinel, or the hosts of the redis-sentinel:// URL; envoy-compat's REDIS_URL).",
			func(s sentinelfollow.Status) int { return s.Sentinels }},
		{SentinelsAnsweringMetric, "Sentinels that answered the client's last question for the primary (asked every second): with its address, or saying they do not know the master. 0 before the first answer.",
			func(s sentinelfollow.Status) int { return s.Answering }},
		{SentinelMajorityMetric, "1 when a majority of the sentinels named one primary at the client's last question (every second), 0 otherwise: while they do not answer, decisions go on with the primary named last, and a failover is not followed until a majority answers again; while floodgate_sentinel_unknown_master is 1, see it.",
			func(s sentinelfollow.Status) int { return b2i(s.Majority) }},
		{SentinelUnknownMasterMetric, "1 when a majority of the sentinels answered the client's last question (every second) that they do not monitor the master (a wrong --redis-master, or SENTINEL REMOVE), 0 otherwise: the primary is forgotten, and each new connection goes to the primary a sentinel that still monitors the master names, or fails when none does.",
			func(s sentinelfollow.Status) int { return b2i(s.UnknownMaster) }},
	} {
		if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help, ConstLabels: labels},
			func() float64 { return float64(g.value(status())) })); err != nil {
			return err
		}
	}
	return nil
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
