package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "time/tzdata" // quota time zones, whatever the machine has installed

	"gopkg.in/yaml.v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/duration"
	"github.com/floodgate-rl/floodgate/internal/yamlerr"
)

var layerFields = []string{
	"name", "algorithm", "limit", "window", "burst", "max_delay",
	"dimension", "shards", "cost", "shadow", "tiers",
	"period", "timezone", "anchor_day",
}

var overrideFields = []string{"limit", "window", "burst", "max_delay"}

// layer parses and validates one layer of pol.
func (p *parser) layer(n *yaml.Node, pol *Policy, c *Config) *Layer {
	f := p.fields(n, fmt.Sprintf("a layer of policy %q", pol.Name), layerFields...)
	if n.Kind != yaml.MappingNode {
		return nil
	}
	l := &Layer{Shards: 1}
	name, ok := f["name"]
	if !ok {
		p.errorf(n, "a layer of policy %q has no name", pol.Name)
		return nil
	}
	l.Name = p.str(name.val, "layer name")
	if err := validName(l.Name); err != nil {
		p.errorf(name.val, "layer %v", err)
		return nil
	}
	if derivedLike(l.Name) {
		// "edge" + "user-f1a3c26b9ee4" is the name serve derives for an
		// Envoy descriptor user of domain edge: the HTTP layer would count
		// on that descriptor's keys.
		p.errorf(name.val, "layer name %q ends in '-' and 12 hex digits (letters and digits), the shape of the policy names derived for Envoy descriptors (docs/envoy.md), whose counters it could share; rename it", l.Name)
		return nil
	}
	what := fmt.Sprintf("layer %q of policy %q", l.Name, pol.Name)
	full := pol.Name + "." + l.Name
	if len(full) > floodgate.MaxNameLen {
		p.errorf(name.val, "%s: %q is %d characters; policy and layer names with the dot between them must fit in %d", what, full, len(full), floodgate.MaxNameLen)
		return nil
	}
	bad := p.found

	base := floodgate.Policy{Name: full}
	if a, ok := f["algorithm"]; ok {
		if s, ok := p.scalar(a.val, what+" algorithm"); ok {
			alg, err := floodgate.ParseAlgorithm(s)
			if err != nil {
				p.errorf(a.val, "%s: unknown algorithm %q (want fixed_window, sliding_window, sliding_log, token_bucket, gcra, leaky_bucket or quota)", what, s)
			}
			base.Algorithm = alg
		}
	} else {
		p.errorf(n, "%s has no algorithm", what)
	}
	if v, ok := f["limit"]; ok {
		base.Limit, _ = p.integer(v.val, what+" limit", 1, floodgate.MaxLimit)
	} else {
		p.errorf(n, "%s has no limit", what)
	}
	if base.Algorithm == floodgate.Quota {
		p.calendar(n, f, &base, what)
	} else {
		for _, k := range []string{"period", "timezone", "anchor_day"} {
			if v, ok := f[k]; ok {
				p.errorf(v.key, "%s: %s applies to algorithm quota only", what, k)
			}
		}
		if v, ok := f["window"]; ok {
			base.Window = p.window(v.val, what)
		} else {
			p.errorf(n, "%s has no window", what)
		}
	}
	if v, ok := f["burst"]; ok {
		base.Burst, _ = p.integer(v.val, what+" burst", 1, floodgate.MaxLimit)
	}
	if v, ok := f["max_delay"]; ok {
		base.MaxDelay = p.maxDelay(v.val, what)
	}
	// core counts the problems of the fields the policy is built from:
	// without those, the policy cannot be checked as a whole. Problems of
	// the other fields do not stop that check, so that every problem of
	// the layer is reported at once.
	core := p.found
	if v, ok := f["dimension"]; ok {
		l.Dimensions = p.dimension(v.val, what)
	} else {
		p.errorf(n, "%s has no dimension (use %q for a limit shared by every request, or an identity value such as \"user\")", what, GlobalDimension)
	}
	if v, ok := f["shards"]; ok {
		shards, ok := p.integer(v.val, what+" shards", 1, MaxShards)
		if ok && shards > 1 && len(l.Dimensions) > 0 {
			p.errorf(v.val, "%s: shards applies to a %q layer only", what, GlobalDimension)
		}
		l.Shards = int(shards)
	}
	if v, ok := f["cost"]; ok {
		l.Cost, _ = p.integer(v.val, what+" cost", 1, floodgate.MaxCost)
	}
	if v, ok := f["shadow"]; ok {
		l.Shadow = p.boolean(v.val, what+" shadow")
	}
	if core > bad {
		return nil
	}
	var ok2 bool
	if l.base, ok2 = p.shard(n, base, max(l.Shards, 1), what); !ok2 {
		return nil
	}
	if t, ok := f["tiers"]; ok {
		l.overrides = p.overrides(t, base, l.Shards, c, pol, what)
	}
	if v, ok := f["cost"]; ok && l.Cost > 0 {
		p.costFits(v.val, l.base, l.Cost, what)
		for _, tier := range slices.Sorted(maps.Keys(l.overrides)) {
			p.costFits(v.val, l.overrides[tier], l.Cost, fmt.Sprintf("%s tier %q", what, tier))
		}
	}
	if p.found > bad {
		return nil
	}
	return l
}

// costFits refuses a layer's fixed cost that its policy can never admit:
// every request would be denied with cost_exceeds_limit.
func (p *parser) costFits(n *yaml.Node, pol floodgate.Policy, cost int64, what string) {
	most := pol.Capacity()
	if pol.Algorithm == floodgate.GCRA && pol.MaxDelay > 0 {
		// A shaping GCRA admits, with a delay, what fits in its burst
		// plus MaxDelay's worth of emission intervals.
		iv := pol.Window.Microseconds() / pol.Limit
		most = (most*iv + pol.MaxDelay.Microseconds()) / iv
	}
	if cost > most {
		p.errorf(n, "%s: cost %d exceeds the %d its policy (%s) can ever admit at once, so every request would be denied", what, cost, most, pol)
	}
}

// shard divides a sharded layer's limit (and burst) over its shards and
// validates the result.
func (p *parser) shard(n *yaml.Node, pol floodgate.Policy, shards int, what string) (floodgate.Policy, bool) {
	if shards > 1 {
		if pol.Limit < int64(shards) {
			p.errorf(n, "%s: limit %d is smaller than its %d shards", what, pol.Limit, shards)
			return pol, false
		}
		pol.Limit /= int64(shards)
		if pol.Burst > 0 {
			pol.Burst = max(pol.Burst/int64(shards), 1)
		}
	}
	if err := pol.Validate(); err != nil {
		p.errorf(n, "%s: %s", what, policyProblems(err, pol.Name))
		return pol, false
	}
	return pol, true
}

// policyProblems returns the problems Validate found in the policy named
// name, without the prefix naming it ("floodgate: invalid policy: policy
// \"api.per-user\": "): the layer's own name says which it is.
func policyProblems(err error, name string) string {
	msg := strings.TrimPrefix(err.Error(), floodgate.ErrInvalidPolicy.Error()+": ")
	return strings.TrimPrefix(msg, fmt.Sprintf("policy %q: ", name))
}

// dimension parses "global", "user" or "user+ip".
func (p *parser) dimension(n *yaml.Node, what string) []string {
	s, ok := p.scalar(n, what+" dimension")
	if !ok {
		return nil
	}
	if s == GlobalDimension {
		return nil
	}
	parts := strings.Split(s, "+")
	for i, d := range parts {
		if err := validDimension(d); err != nil {
			p.errorf(n, "%s dimension %v", what, err)
			return nil
		}
		if d == GlobalDimension {
			p.errorf(n, "%s dimension: %q cannot be combined with other dimensions", what, GlobalDimension)
			return nil
		}
		if contains(parts[:i], d) {
			p.errorf(n, "%s dimension: %q appears twice", what, d)
			return nil
		}
	}
	return parts
}

// overrides parses a layer's tiers mapping: tier name → limit overrides.
func (p *parser) overrides(t field, base floodgate.Policy, shards int, c *Config, pol *Policy, what string) map[string]floodgate.Policy {
	n := t.val
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s tiers must be a mapping of tier name to limits, got %s", what, yamlerr.Describe(n))
		return nil
	}
	if pol.TierDimension == "" {
		p.errorf(t.key, "%s has tier overrides but policy %q has no tier_dimension saying whose tier applies", what, pol.Name)
		return nil
	}
	out := map[string]floodgate.Policy{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		tier := k.Value
		if !c.HasTier(tier) {
			p.errorf(k, "%s: tier %q is not defined (tiers: %s)", what, tier, strings.Join(c.tiers, ", "))
			continue
		}
		if _, dup := out[tier]; dup {
			p.errorf(k, "%s: tier %q appears twice", what, tier)
			continue
		}
		tw := fmt.Sprintf("%s tier %q", what, tier)
		f := p.fields(v, tw, overrideFields...)
		if v.Kind != yaml.MappingNode {
			continue
		}
		if len(f) == 0 {
			p.errorf(v, "%s overrides nothing (set limit, window, burst or max_delay)", tw)
			continue
		}
		// Overrides start from the layer as written, before sharding.
		pt := base
		bad := p.found
		if x, ok := f["limit"]; ok {
			pt.Limit, _ = p.integer(x.val, tw+" limit", 1, floodgate.MaxLimit)
		}
		if x, ok := f["window"]; ok {
			pt.Window = p.window(x.val, tw)
		}
		if x, ok := f["burst"]; ok {
			pt.Burst, _ = p.integer(x.val, tw+" burst", 1, floodgate.MaxLimit)
		}
		if x, ok := f["max_delay"]; ok {
			pt.MaxDelay = p.maxDelay(x.val, tw)
		}
		if p.found > bad {
			continue
		}
		if pt, ok := p.shard(v, pt, shards, tw); ok {
			out[tier] = pt
		}
	}
	return out
}

// derivedLike reports whether a layer name ends as the policy names
// derived for Envoy descriptors do (envoyrls.PolicyName): '-' and 12
// lower-case hex digits, among them both a letter and a digit. Numbers
// ("sku-123456789012") are left alone: a name made of them was valid
// before this check and is what a hash gives only once in about 300.
func derivedLike(name string) bool {
	const n = 12
	if len(name) < n+1 || name[len(name)-n-1] != '-' {
		return false
	}
	letter, digit := false, false
	for _, c := range name[len(name)-n:] {
		switch {
		case c >= '0' && c <= '9':
			digit = true
		case c >= 'a' && c <= 'f':
			letter = true
		default:
			return false
		}
	}
	return letter && digit
}

// FormatDuration writes d in the form the documentation uses: whole days
// as "30d", anything else as Go writes it ("1m0s", "36h0m0s").
// ParseDuration reads back every positive d it writes; 0 and negative
// durations are written too ("0s", "-1m0s"), for messages, but are not
// valid durations of a configuration.
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// ParseDuration parses a Go duration ("90s", "1h30m") or a whole number of
// days ("1d", "30d"). The result must be positive.
func ParseDuration(s string) (time.Duration, error) {
	return duration.Parse(s)
}

// window parses a layer's (or a tier override's) window and checks its
// range here, so that it is reported with the layer's other problems: the
// policy's own check (floodgate.Policy.Validate, the same range) runs only
// once every field it reads is valid.
func (p *parser) window(n *yaml.Node, what string) time.Duration {
	d, ok := p.duration(n, what+" window", floodgate.MinWindow, floodgate.MaxWindow)
	if ok && (d < floodgate.MinWindow || d > floodgate.MaxWindow) {
		p.errorf(n, "%s window %s out of range %s..%s", what, FormatDuration(d), FormatDuration(floodgate.MinWindow), FormatDuration(floodgate.MaxWindow))
	}
	return d
}

// maxDelay parses a layer's (or a tier override's) max_delay. Unlike
// other durations it may be 0 ("0", "0s"): the same as leaving it out, a
// gcra layer that denies what does not conform now (and a tier's 0 turns
// its layer's shaping off). A negative one is kept for the policy's own
// check, which reports it out of max_delay's range,
// 0s..floodgate.MaxMaxDelay, as it does one too long (and one too long to
// be held is reported so here).
func (p *parser) maxDelay(n *yaml.Node, what string) time.Duration {
	if r := resolve(n); r.Kind == yaml.ScalarNode {
		if d, err := time.ParseDuration(r.Value); err == nil && d <= 0 {
			return d
		}
	}
	d, _ := p.duration(n, what+" max_delay", 0, floodgate.MaxMaxDelay)
	return d
}

// calendar parses a quota layer's period, timezone and anchor_day.
func (p *parser) calendar(n *yaml.Node, f map[string]field, pol *floodgate.Policy, what string) {
	if v, ok := f["window"]; ok {
		p.errorf(v.key, "%s: a quota counts per calendar period; set period (day, week, month or anchored_month), not window", what)
	}
	v, ok := f["period"]
	if !ok {
		p.errorf(n, "%s has no period (day, week, month or anchored_month)", what)
		return
	}
	if s, ok := p.scalar(v.val, what+" period"); ok {
		u, err := floodgate.ParsePeriodUnit(s)
		if err != nil {
			p.errorf(v.val, "%s: unknown period %q (want day, week, month or anchored_month)", what, s)
			return
		}
		pol.Calendar.Unit = u
	}
	if v, ok := f["timezone"]; ok {
		if s, ok := p.scalar(v.val, what+" timezone"); ok {
			loc, err := time.LoadLocation(s)
			if err != nil || s == "" || s == "Local" {
				// Reported, and anchor_day still checked below: every
				// problem of the layer at once.
				p.errorf(v.val, "%s: unknown IANA time zone %q (e.g. UTC, Europe/Berlin, America/New_York)", what, s)
			} else {
				pol.Calendar.Location = loc
			}
		}
	}
	if v, ok := f["anchor_day"]; ok {
		d, ok := p.integer(v.val, what+" anchor_day", 1, 31)
		if ok && pol.Calendar.Unit != floodgate.PeriodAnchoredMonth {
			p.errorf(v.val, "%s: anchor_day applies to period anchored_month only", what)
		}
		pol.Calendar.AnchorDay = int(d)
	} else if pol.Calendar.Unit == floodgate.PeriodAnchoredMonth {
		p.errorf(n, "%s: period anchored_month needs anchor_day (1..31, the subscription day)", what)
	}
}
