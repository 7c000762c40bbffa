package envoyrls

import (
	"fmt"
	"math"
	"math/big"
	"sort"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
)

// Limits on configurations and requests.
const (
	// MaxConfigSize is the largest configuration file ParseConfig reads.
	MaxConfigSize = 4 << 20
	// MaxDepth is the deepest nesting of descriptors in a configuration.
	// A request descriptor with more entries matches no rule.
	MaxDepth = 32
	// MaxDescriptors is the most distinct limited counters one request
	// may decide: each becomes one layer of a single floodgate decision
	// (with Options.CountEachDescriptor, each limited descriptor is one
	// decision). Descriptors that match no limit, and duplicates merged
	// into one layer, do not count; a request carrying more is refused.
	MaxDescriptors = floodgate.MaxLayers
	// MaxRequestDescriptors is the most descriptors one request may
	// carry, repeats included, whether or not they match a limit: a
	// request of more is refused (INVALID_ARGUMENT) before anything is
	// matched or counted. Envoy sends one descriptor per rate_limit
	// action list of the route and virtual host whose actions all
	// produced an entry, a handful in real configurations; without the
	// bound, a few requests of 150,000 repeats of one descriptor (under
	// gRPC's 4 MiB message limit) took floodgate serve from 31 to 422 MB
	// of memory. The gRPC server's codec decodes no more than one
	// descriptor past it (internal/rlswire).
	MaxRequestDescriptors = 256
	// maxAliasNodes bounds the YAML nodes a document's aliases add when
	// expanded (beyond the document's own nodes), so that a small file of
	// nested aliases (an alias bomb) cannot make ParseConfig run for ever
	// or fill memory. A file without aliases is bounded by MaxConfigSize
	// alone.
	maxAliasNodes = 200_000
)

// Rule is one configured limit: the rate_limit of one descriptor node. A
// Rule is immutable once its Config is built.
type Rule struct {
	// Domain is the configuration domain the rule belongs to.
	Domain string
	// Path names the descriptor node as envoyproxy/ratelimit does: its
	// entries from the root, each "key" or "key_value", joined with ".",
	// e.g. "remote_address" or "database_users.user".
	Path string
	// Name is the rate_limit's optional name, the one other rules refer to
	// in replaces; empty when unnamed.
	Name string
	// Replaces lists the names of the rules this one replaces: when both
	// match descriptors of one request, those are not applied.
	Replaces []string
	// Unlimited reports a rate_limit with unlimited: true: the descriptor
	// is matched but never limited.
	Unlimited bool
	// Shadow reports shadow_mode: the rule is decided and counted, and its
	// status may say OVER_LIMIT, but it never makes the overall answer
	// OVER_LIMIT.
	Shadow bool
	// RequestsPerUnit, Unit and UnitMultiplier describe the limit as
	// Envoy's API reports it in current_limit. A window that is not a
	// whole number of seconds is scaled, with the limit, to the shortest
	// whole number of seconds that is a multiple of it (4 per 1.5 s: 8 per
	// 3 × SECOND); the closest rate that fits when those numbers overflow
	// uint32.
	RequestsPerUnit uint32
	Unit            rlspb.RateLimitResponse_RateLimit_Unit
	UnitMultiplier  uint32
	// Policy is the floodgate policy the rule applies, its name derived
	// from the domain and the descriptor path (see PolicyName). It is the
	// zero Policy when Unlimited is set or RequestsPerUnit is 0 (a rule
	// that denies every request).
	Policy floodgate.Policy
	// File and Line locate the rule's rate_limit in its configuration.
	File string
	Line int

	// limitPB is the current_limit answers report, built once by the
	// parser and shared by every answer (nil for an unlimited rule).
	limitPB *rlspb.RateLimitResponse_RateLimit
}

// denies reports a rule with requests_per_unit 0: every request is over
// the limit, without asking the store.
func (r *Rule) denies() bool { return !r.Unlimited && r.Policy.Limit == 0 }

// Config is a parsed descriptor configuration: one or more domains. It is
// immutable and safe for concurrent use; to change limits, parse a new
// Config and have the Service's config function return it.
type Config struct {
	domains map[string]*domain
	rules   []*Rule
}

// domain is the descriptor tree of one domain.
type domain struct {
	name         string
	file         string
	line, column int // of the domain's value
	root         *node
}

// node is one configured descriptor: an entry key, an optional value
// (empty: any value; ending in "*": any value with that prefix), its
// rule and its children.
type node struct {
	key, value  string
	wildcard    bool
	parts       []string // a wildcard value split at each "*"
	rule        *Rule
	exact       map[Entry]*node    // children with a value, and key-only ones under value ""
	wild        map[string][]*node // wildcard children by key, in file order
	byComposite map[string]*node   // children by envoyproxy/ratelimit's composite key
	line        int
}

// Entry is one key/value pair of a descriptor, as in Envoy's
// RateLimitDescriptor.Entry.
type Entry struct{ Key, Value string }

func newNode(key, value string, line int) *node {
	n := &node{key: key, value: value, line: line, exact: map[Entry]*node{}}
	if strings.Contains(value, "*") {
		n.wildcard = true
		n.parts = strings.Split(value, "*")
	}
	return n
}

// composite is the node's key as envoyproxy/ratelimit keys it: "key" or
// "key_value".
func (n *node) composite() string {
	if n.value == "" {
		return n.key
	}
	return n.key + "_" + n.value
}

// claimComposite records c's composite key among n's children, or returns
// the sibling that already has it (envoyproxy/ratelimit refuses two).
func (n *node) claimComposite(c *node) *node {
	if n.byComposite == nil {
		n.byComposite = map[string]*node{}
	}
	k := c.composite()
	if o := n.byComposite[k]; o != nil {
		return o
	}
	n.byComposite[k] = c
	return nil
}

// child returns the child matching entry (key, value): an exact key and
// value first, then the first wildcard child, in file order, whose
// pattern matches the value (each "*" matching any run of bytes, also in
// the middle: "/api/*/items"), then the key-only child, as
// envoyproxy/ratelimit matches; nil when none does.
func (n *node) child(key, value string) *node {
	if value != "" {
		if c := n.exact[Entry{key, value}]; c != nil {
			return c
		}
	}
	for _, c := range n.wild[key] {
		if MatchWildcard(c.parts, value) {
			return c
		}
	}
	return n.exact[Entry{key, ""}]
}

// MatchWildcard reports whether s matches a pattern given as parts, the
// pattern split at each "*": s starts with the first part, ends with the
// last, and holds the others in order between them, without overlap.
// Each "*" matches any run of bytes, the empty one included.
func MatchWildcard(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(s) < fixed {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// addChild inserts c, or returns the sibling it duplicates.
func (n *node) addChild(c *node) *node {
	if c.wildcard {
		for _, o := range n.wild[c.key] {
			if o.value == c.value {
				return o
			}
		}
		if n.wild == nil {
			n.wild = map[string][]*node{}
		}
		n.wild[c.key] = append(n.wild[c.key], c)
		return nil
	}
	k := Entry{c.key, c.value}
	if o := n.exact[k]; o != nil {
		return o
	}
	n.exact[k] = c
	return nil
}

// Domains returns the configured domain names, sorted.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for name := range c.domains {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// HasDomain reports whether domain is configured.
func (c *Config) HasDomain(domain string) bool { _, ok := c.domains[domain]; return ok }

// Rules returns every configured limit, in file order. The slice is the
// Config's own: do not modify it.
func (c *Config) Rules() []*Rule { return c.rules }

// MergeConfigs combines configurations parsed from several files (as
// envoyproxy/ratelimit loads a directory) into one. A domain defined twice
// is an error naming both files.
func MergeConfigs(cfgs ...*Config) (*Config, error) {
	out := &Config{domains: map[string]*domain{}}
	names := map[string]*Rule{}
	for _, c := range cfgs {
		if c == nil {
			continue
		}
		for name, d := range c.domains {
			if o := out.domains[name]; o != nil {
				return nil, &ConfigError{File: d.file, Line: d.line, Column: d.column, Msg: fmt.Sprintf("domain %q is already defined in %s:%d:%d", name, o.file, o.line, o.column)}
			}
			out.domains[name] = d
		}
		for _, r := range c.rules {
			if err := checkUniquePolicy(names, r); err != nil {
				return nil, err
			}
			out.rules = append(out.rules, r)
		}
	}
	if len(out.domains) == 0 {
		return nil, &ConfigError{File: "(merge)", Msg: "no domain configured"}
	}
	return out, nil
}

// checkUniquePolicy records r's policy name, failing if another rule
// already uses it (a hash collision, or the same node loaded twice).
func checkUniquePolicy(names map[string]*Rule, r *Rule) error {
	if r.Policy.Name == "" {
		return nil
	}
	if o := names[r.Policy.Name]; o != nil {
		return &ConfigError{File: r.File, Line: r.Line, Msg: fmt.Sprintf("descriptor %s.%s maps to policy name %q, already used by %s.%s at %s:%d", r.Domain, r.Path, r.Policy.Name, o.Domain, o.Path, o.File, o.Line)}
	}
	names[r.Policy.Name] = r
	return nil
}

// units maps envoyproxy/ratelimit's unit names to Envoy's enum and length.
var units = map[string]struct {
	unit rlspb.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	"second": {rlspb.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {rlspb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {rlspb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {rlspb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {rlspb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
}

// unitLength returns the length of an Envoy unit; false for UNKNOWN and
// for the calendar units MONTH and YEAR, which fixed windows aligned to
// the Unix epoch cannot follow.
func unitLength(u rlspb.RateLimitResponse_RateLimit_Unit) (time.Duration, bool) {
	for _, v := range units {
		if v.unit == u {
			return v.d, true
		}
	}
	return 0, false
}

// describeWindow returns how Envoy's API reports a limit of limit per
// window: requests_per_unit per unit × unit_multiplier, in the largest unit
// that divides the window. A window that is not a whole number of seconds
// is scaled, with the limit, to the shortest whole number of seconds that
// is a multiple of it (4 per 1.5 s as 8 per 3 × SECOND), so that the rate
// reported is the rate enforced; only when those numbers do not fit
// Envoy's 32-bit fields is it the closest rate that fits.
func describeWindow(limit int64, window time.Duration) (uint32, rlspb.RateLimitResponse_RateLimit_Unit, uint32) {
	// window×k is the shortest whole number of seconds (window/g) that is
	// a multiple of window; limit×k fits int64, limit being at most
	// 2^32-1 and k at most 10^9.
	g := gcd(int64(window), int64(time.Second))
	k := int64(time.Second) / g
	n, secs := uint64(limit*k), uint64(int64(window)/g)
	if n > math.MaxUint32 || secs > math.MaxUint32 {
		n, secs = closestRatio(n, secs, math.MaxUint32)
		if n == 0 && limit > 0 {
			n, secs = 1, math.MaxUint32
		}
	}
	for _, name := range []string{"week", "day", "hour", "minute", "second"} {
		u := units[name].d / time.Second
		if secs%uint64(u) == 0 {
			return uint32(n), units[name].unit, uint32(secs / uint64(u))
		}
	}
	panic("unreachable: SECOND divides every whole number of seconds")
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// closestRatio returns the fraction p/q closest to n/d (d > 0) with p and
// q at most limit and q at least 1: the better of the last convergent of
// n/d's continued fraction within those bounds and the largest
// semiconvergent after it.
func closestRatio(n, d, limit uint64) (p, q uint64) {
	x, y := n, d
	// h1/k1 and h2/k2 are the last two convergents (1/0 and 0/1 before
	// the first).
	h1, k1, h2, k2 := uint64(1), uint64(0), uint64(0), uint64(1)
	for y != 0 {
		a := x / y
		// The next convergent is (a×h1+h2)/(a×k1+k2); t is the largest
		// multiple up to a keeping both within limit.
		t := a
		if h1 > 0 {
			t = min(t, (limit-h2)/h1)
		}
		if k1 > 0 {
			t = min(t, (limit-k2)/k1)
		}
		if t < a {
			sp, sq := t*h1+h2, t*k1+k2
			if k1 == 0 || (t > 0 && distance(sp, sq, n, d).Cmp(distance(h1, k1, n, d)) < 0) {
				return sp, sq
			}
			return h1, k1
		}
		h1, k1, h2, k2 = a*h1+h2, a*k1+k2, h1, k1
		x, y = y, x-a*y
	}
	return h1, k1
}

// distance returns |p/q - n/d|.
func distance(p, q, n, d uint64) *big.Rat {
	r := new(big.Rat).SetFrac(new(big.Int).SetUint64(p), new(big.Int).SetUint64(q))
	r.Sub(r, new(big.Rat).SetFrac(new(big.Int).SetUint64(n), new(big.Int).SetUint64(d)))
	return r.Abs(r)
}

func clampUint32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(v)
}
