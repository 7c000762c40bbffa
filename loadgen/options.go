// Package loadgen drives a running Floodgate service with rate-limit
// checks, over its HTTP/JSON API or Envoy's gRPC rate limit API, and
// reports what happened: the rate achieved, how many checks were allowed
// and denied, the share denied against the share expected from the limit,
// errors, and latency percentiles from an HDR-style histogram.
//
// It runs open loop (a fixed arrival rate, as k6's constant-arrival-rate
// executor does) or closed loop (each worker sends its next request as
// soon as the previous one returns). In open loop the latency of a request
// is measured from its scheduled time, so that queueing behind busy
// workers shows in it, but only for arrivals that were sent: an arrival
// that finds every worker busy and the queue full is dropped, counted
// in Report.Dropped and not timed, so when a slow server makes many
// arrivals drop, the percentiles understate its queueing (the report
// warns when more than MaxDroppedShare of the arrivals were dropped).
package loadgen

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// ErrInvalidOptions reports Options out of range; the message says which.
var ErrInvalidOptions = errors.New("loadgen: invalid options")

// Mode selects the API a load test speaks.
type Mode uint8

// The modes. The zero value means "from the Target's scheme": HTTP for
// http and https, GRPC for grpc.
const (
	// HTTP posts {"policy":..., "identity":{...}, "cost":...} to
	// Target/v1/check?enforce=1; 200 with "allowed": true is allowed, 429
	// (or "allowed": false) is denied, anything else is an error.
	HTTP Mode = iota + 1
	// GRPC calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
	// with one descriptor {IdentityKey: identity}; OK is allowed,
	// OVER_LIMIT is denied, anything else (UNKNOWN, a gRPC error) is an
	// error.
	GRPC
	// EnvoyJSON posts Envoy's rate limit request as JSON to Target/json,
	// the HTTP endpoint of envoyproxy/ratelimit and of `floodgate
	// envoy-compat`: {"domain":..., "descriptors":[{"entries":[{"key":
	// IdentityKey, "value": identity}]}], "hitsAddend": cost}. 200 with
	// "overallCode": "OK" is allowed, 429 is denied, anything else is an
	// error. It needs an http or https Target.
	EnvoyJSON
)

// String returns "http", "grpc" or "envoy-json".
func (m Mode) String() string {
	switch m {
	case HTTP:
		return "http"
	case GRPC:
		return "grpc"
	case EnvoyJSON:
		return "envoy-json"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode returns the Mode named s ("http", "grpc" or "envoy-json"); ""
// is the zero Mode (from the Target's scheme).
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{HTTP, GRPC, EnvoyJSON} {
		if s == m.String() {
			return m, nil
		}
	}
	if s == "" {
		return 0, nil
	}
	return 0, fmt.Errorf("%w: mode %q: want http, grpc or envoy-json", ErrInvalidOptions, s)
}

// ModeOf returns the Mode a run of Options{Target: target, Mode: m}
// speaks: m, or when m is zero the one target's scheme implies (HTTP for
// http and https, GRPC for grpc and grpcs). It returns an error wrapping
// ErrInvalidOptions for a target that is not a service's base URL or
// does not fit m.
func ModeOf(target string, m Mode) (Mode, error) {
	bad := func(format string, args ...any) (Mode, error) {
		return 0, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return bad("target %q: want http://host:port or grpc://host:port (https, grpcs over TLS)", target)
	}
	if u.User != nil {
		// Nothing would send them: the service takes no credentials in
		// the URL (a client certificate authenticates, see Options.TLS).
		return bad("target %q: user information in the URL is not used by any API the load generator speaks: remove it (a service that requires clients to authenticate takes a client certificate)", u.Redacted())
	}
	if u.Port() == "" {
		return bad("target %q: no port: want %s://%s:PORT", target, u.Scheme, u.Hostname())
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return bad("target %q: port %s out of range 1..65535", target, u.Port())
	}
	web, grpc := u.Scheme == "http" || u.Scheme == "https", u.Scheme == "grpc" || u.Scheme == "grpcs"
	switch {
	case m == 0 && web:
		return HTTP, nil
	case m == 0 && grpc:
		return GRPC, nil
	case (m == HTTP || m == EnvoyJSON) && web, m == GRPC && grpc:
		return m, nil
	case m == 0:
		return bad("target %q: unknown scheme %q (want http, https, grpc or grpcs)", target, u.Scheme)
	case m == GRPC:
		return bad("target %q: mode grpc needs a grpc:// or grpcs:// target", target)
	}
	return bad("target %q: mode %v needs an http:// or https:// target", target, m)
}

// MaxCost returns the largest Options.Cost a run in mode m can send: over
// the HTTP API floodgate.MaxCost, the largest cost a check may have; over
// Envoy's APIs (GRPC, EnvoyJSON) math.MaxUint32, since the cost travels
// as the request's hits_addend, a uint32.
func MaxCost(m Mode) int64 {
	if m == HTTP {
		return floodgate.MaxCost
	}
	return math.MaxUint32
}

// costBound says why MaxCost(m) is the bound, for messages.
func costBound(m Mode) string {
	if m == HTTP {
		return "the HTTP API's largest cost"
	}
	return "Envoy's hits_addend is a uint32"
}

// GRPCClient selects the client the GRPC mode calls with.
type GRPCClient uint8

// The gRPC clients.
const (
	// RawGRPC, the zero value, is the load generator's own small HTTP/2
	// client for its one call (x/net's HTTP/2 framing and HPACK, plaintext
	// h2c): requests of the workers sharing a connection go out together
	// in one write, the request's headers are indexed in HPACK's dynamic
	// table as Envoy's and grpc-go's clients send them, and its message is
	// written around the identity. It costs the load generator a fraction
	// of grpc-go's client.
	RawGRPC GRPCClient = iota
	// GRPCGo calls with google.golang.org/grpc's client, one ClientConn
	// per connection.
	GRPCGo
)

// String returns "raw" or "grpc-go".
func (c GRPCClient) String() string {
	switch c {
	case RawGRPC:
		return "raw"
	case GRPCGo:
		return "grpc-go"
	}
	return fmt.Sprintf("GRPCClient(%d)", uint8(c))
}

// ParseGRPCClient returns the GRPCClient named s ("raw" or "grpc-go"); ""
// is RawGRPC.
func ParseGRPCClient(s string) (GRPCClient, error) {
	switch s {
	case "", "raw":
		return RawGRPC, nil
	case "grpc-go":
		return GRPCGo, nil
	}
	return 0, fmt.Errorf("%w: gRPC client %q: want raw or grpc-go", ErrInvalidOptions, s)
}

// WorkersPerConnection is how many workers share one gRPC connection by
// default (Options.Connections).
const WorkersPerConnection = 16

// Limits on Options.
const (
	MaxRate        = 1_000_000
	MaxConcurrency = 10_000
	MaxIdentities  = 10_000_000
	MaxDuration    = 24 * time.Hour
)

// Options configures a load test. Only Target and Duration are required.
type Options struct {
	// Target is the service's base URL: "http://host:port" (or https) for
	// the HTTP API, "grpc://host:port" (or grpcs, over TLS) for the gRPC
	// API.
	Target string
	// Mode selects the API; zero infers it from Target's scheme.
	Mode Mode
	// Rate is the arrival rate in requests per second (open loop); 0 runs
	// closed loop. At most MaxRate.
	Rate float64
	// Concurrency is the number of workers, so the most requests in flight
	// at once. In open loop, arrivals wait for a free worker in a queue of
	// Concurrency arrivals; one that finds every worker busy and the queue
	// full, at any time of the run, is dropped and counted in
	// Report.Dropped, as k6 counts dropped_iterations, and so is one still
	// queued when Duration ends, or due before it but not yet handed to
	// the queue then (a scheduler woken late). A dropped arrival is never
	// sent nor timed: the requests sent and the arrivals dropped add up
	// to the arrivals scheduled. Default 10.
	Concurrency int
	// Duration is how long new requests are started (1ms..MaxDuration);
	// requests in flight at the end are waited for (up to Timeout, so
	// Report.Elapsed may exceed Duration by up to Timeout), and none is
	// started after it.
	Duration time.Duration
	// MaxRequests, when positive, stops the test after that many requests
	// even if Duration has not elapsed.
	MaxRequests int64
	// Identities is the number of distinct identities the requests are
	// spread over, round robin. Default 1.
	Identities int
	// IdentityPrefix starts every identity, followed by its number. The
	// default is "lg" plus 8 random hex digits plus "-", so every run starts
	// with fresh counters. Preflight's request is for IdentityPrefix,
	// "preflight-" and a random number, which no run's requests use.
	IdentityPrefix string
	// IdentityKey is the identity dimension (HTTP) or descriptor key (gRPC).
	// Default "user".
	IdentityKey string
	// Policy is the policy name sent to the HTTP API. Default "api".
	Policy string
	// Domain is the domain sent to the gRPC API. Default "api".
	Domain string
	// Cost is each request's cost (hits_addend over Envoy's APIs), up to
	// MaxCost(Mode). Default 1.
	Cost int64
	// Expect is the limit the target applies to each identity, used to
	// compute the expected deny ratio by replaying every request answered
	// (allowed or denied), at the moment it was sent, through algo.Step:
	// the same requests as the deny ratio observed. The zero Policy
	// means unknown; its Name may be left empty.
	Expect floodgate.Policy
	// ExpectedDenyRatio (0..1) is used as the expected deny ratio when
	// Expect is not set and ExpectedDenyRatio is positive or
	// HasExpectedDenyRatio is set; leave all three zero when unknown.
	ExpectedDenyRatio float64
	// HasExpectedDenyRatio says ExpectedDenyRatio is given even when it
	// is 0 (no denial expected).
	HasExpectedDenyRatio bool
	// Connections is the number of gRPC connections the workers share,
	// worker i using connection i mod Connections (1..Concurrency). Default
	// one per WorkersPerConnection workers, rounded up. HTTP modes keep up
	// to one keep-alive connection per worker instead.
	Connections int
	// GRPCClient is the client of the GRPC mode; the zero value is
	// RawGRPC.
	GRPCClient GRPCClient
	// Timeout bounds each request, measured by the load generator (no gRPC
	// deadline is sent; see GRPCDeadline): a request still unanswered
	// after Timeout is abandoned and counted as an error. Default 5s.
	Timeout time.Duration
	// GRPCDeadline, when positive, is sent with each gRPC request as its
	// deadline (the grpc-timeout header), as Envoy sends its rate limit
	// filter's timeout (20 ms by default): the service sees it, and a
	// Floodgate service ends its decision before it. Without it the
	// service never learns how long the load generator waits. 0: none;
	// gRPC targets only.
	GRPCDeadline time.Duration
	// HTTPClient sends HTTP requests. Default: for http targets, each
	// worker speaks HTTP/1.1 itself on a keep-alive connection of its own
	// (much cheaper than net/http's client for the load generator); for
	// https, a client whose transport keeps Concurrency idle connections.
	HTTPClient *http.Client
	// TLS configures the client side of TLS for https and grpcs targets:
	// the authorities to trust (RootCAs; nil: the system's, which
	// SSL_CERT_FILE can name) and a client certificate for services that
	// require one (--tls-client-ca-file). Not used with HTTPClient set.
	// Nil means the defaults.
	TLS *tls.Config
	// ProgressLines ends each of Run's progress lines with a newline, for
	// a log or a file, instead of rewriting one line in place with a
	// carriage return, which only a terminal shows as meant (a CI log
	// got the whole run on one line).
	ProgressLines bool

	// lastStreamID, when not zero, is the last stream ID of a raw gRPC
	// connection (tests: a new connection after a few requests).
	lastStreamID uint32
	// onBackOff, when set, is called with each pause a worker takes
	// after a transport error, before it waits (tests).
	onBackOff func(time.Duration)
	// onWake, when set, is called each time the open-loop scheduler
	// wakes for its next arrival, before it emits any (tests: a
	// scheduler woken late).
	onWake func()
}

// withDefaults validates o and fills its defaults.
func (o Options) withDefaults() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return Options{}, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	var err error
	if o.Mode, err = ModeOf(o.Target, o.Mode); err != nil {
		return Options{}, err
	}
	if math.IsNaN(o.Rate) || o.Rate < 0 || o.Rate > MaxRate {
		return bad("rate %v out of range 0..%d", o.Rate, MaxRate)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 10
	}
	if o.Concurrency < 1 || o.Concurrency > MaxConcurrency {
		return bad("concurrency %d out of range 1..%d", o.Concurrency, MaxConcurrency)
	}
	if o.Connections == 0 {
		o.Connections = (o.Concurrency + WorkersPerConnection - 1) / WorkersPerConnection
	}
	if o.Connections < 1 || o.Connections > o.Concurrency {
		return bad("connections %d out of range 1..%d (the concurrency)", o.Connections, o.Concurrency)
	}
	if o.Duration < time.Millisecond || o.Duration > MaxDuration {
		return bad("duration %v out of range 1ms..%v", o.Duration, MaxDuration)
	}
	if o.MaxRequests < 0 {
		return bad("max requests %d is negative", o.MaxRequests)
	}
	if o.Identities == 0 {
		o.Identities = 1
	}
	if o.Identities < 1 || o.Identities > MaxIdentities {
		return bad("identities %d out of range 1..%d", o.Identities, MaxIdentities)
	}
	if o.IdentityPrefix == "" {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return Options{}, fmt.Errorf("loadgen: identity prefix: %w", err)
		}
		o.IdentityPrefix = "lg" + hex.EncodeToString(b[:]) + "-"
	}
	if len(o.IdentityPrefix) > 200 {
		return bad("identity prefix is %d bytes (max 200)", len(o.IdentityPrefix))
	}
	defaults := []struct {
		v    *string
		def  string
		what string
	}{{&o.IdentityKey, "user", "identity key"}, {&o.Policy, "api", "policy"}, {&o.Domain, "api", "domain"}}
	for _, d := range defaults {
		if *d.v == "" {
			*d.v = d.def
		}
		if len(*d.v) > 200 {
			return bad("%s is %d bytes (max 200)", d.what, len(*d.v))
		}
	}
	if o.Cost == 0 {
		o.Cost = 1
	}
	if o.Cost < 1 || o.Cost > MaxCost(o.Mode) {
		return bad("cost %d out of range 1..%d (%s)", o.Cost, MaxCost(o.Mode), costBound(o.Mode))
	}
	if o.Expect != (floodgate.Policy{}) {
		if o.Expect.Name == "" {
			o.Expect.Name = "expect"
		}
		if err := o.Expect.Validate(); err != nil {
			return bad("expect: %v", err)
		}
	}
	if math.IsNaN(o.ExpectedDenyRatio) || o.ExpectedDenyRatio < 0 || o.ExpectedDenyRatio > 1 {
		return bad("expected deny ratio %v out of range 0..1", o.ExpectedDenyRatio)
	}
	if o.ExpectedDenyRatio > 0 {
		o.HasExpectedDenyRatio = true
	}
	if o.HasExpectedDenyRatio && o.Expect != (floodgate.Policy{}) {
		return bad("expect and expected deny ratio exclude each other: give one")
	}
	if o.GRPCClient > GRPCGo {
		return bad("gRPC client %v", o.GRPCClient)
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Timeout < 0 {
		return bad("timeout %v is negative", o.Timeout)
	}
	if o.GRPCDeadline < 0 {
		return bad("gRPC deadline %v is negative", o.GRPCDeadline)
	}
	if o.GRPCDeadline > 0 && o.Mode != GRPC {
		return bad("a gRPC deadline applies to gRPC targets only (grpc:// or grpcs://)")
	}
	return o, nil
}
