package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/yamlerr"
	"github.com/floodgate-rl/floodgate/quota"
)

// Limits and defaults of quotas.
const (
	// MaxQuotas is the most quotas one configuration may define.
	MaxQuotas = 1000
	// DefaultSoftThreshold is a quota's soft_threshold when it sets none.
	DefaultSoftThreshold = 0.8
	// DefaultHold is a quota's hold when it sets none.
	DefaultHold = 10 * time.Minute
)

// Quota is one billing quota (package quota): a limit of cost units per
// calendar period for each identity of a dimension, served by the
// /v1/quota/ endpoints with check, status, reserve and settle.
type Quota struct {
	// Name identifies the quota in requests and namespaces its keys, e.g.
	// "llm-tokens".
	Name string
	// Dimensions are the identity values that key the quota, e.g.
	// ["api_key"]; empty for one quota shared by every request.
	Dimensions []string
	// TierDimension is the identity value whose assigned tier sets the
	// limit (the single dimension unless configured); "" when none.
	TierDimension string
	// SoftThreshold is the fraction of the limit from which results are
	// marked soft (a warning), in (0, 1]. Default DefaultSoftThreshold.
	SoftThreshold float64
	// Hold is how long a reservation holds its estimate when it is never
	// settled. Default DefaultHold.
	Hold time.Duration

	base      quota.Policy
	overrides map[string]quota.Policy
}

// Dimension returns the quota's dimension as written: "global" or the
// dimension names joined with "+".
func (q *Quota) Dimension() string { return dimensionName(q.Dimensions) }

// Policy returns the quota under tier (the base limit when the tier has no
// override). Every tier shares one name and calendar, so an identity that
// changes tier keeps the period's usage.
func (q *Quota) Policy(tier string) quota.Policy {
	if p, ok := q.overrides[tier]; ok {
		return p
	}
	return q.base
}

// Options returns the quota.Options the configuration sets
// (SoftThreshold and HoldTTL); the caller adds Prefix and Clock.
func (q *Quota) Options() quota.Options {
	return quota.Options{SoftThreshold: q.SoftThreshold, HoldTTL: q.Hold}
}

// Tiered reports whether the limit depends on the tier.
func (q *Quota) Tiered() bool { return q.TierDimension != "" && len(q.overrides) > 0 }

// Identity returns the identity the quota keys on, taken from values
// (dimension → value); "global" for a global quota.
func (q *Quota) Identity(values map[string]string) (string, error) {
	return identityOf("quota", q.Name, q.Dimensions, values)
}

var quotaFields = []string{"name", "limit", "period", "timezone", "anchor_day", "dimension", "tier_dimension", "soft_threshold", "hold", "tiers"}

// named is what quotas and concurrency limits share in the configuration:
// a name, a dimension and a tier dimension.
type named struct {
	name    string
	dims    []string
	tierDim string
	what    string // e.g. `quota "llm-tokens"`
}

// keyed parses the name, dimension and tier_dimension of a quota or
// concurrency limit; kind is "quota" or "concurrency limit". It returns
// false when the entry cannot be used at all.
func (p *parser) keyed(n *yaml.Node, f map[string]field, kind string) (named, bool) {
	var k named
	name, ok := f["name"]
	if !ok {
		p.errorf(n, "a %s has no name", kind)
		return k, false
	}
	k.name = p.str(name.val, kind+" name")
	if err := validName(k.name); err != nil {
		p.errorf(name.val, "%s %v", kind, err)
		return k, false
	}
	k.what = fmt.Sprintf("%s %q", kind, k.name)
	if v, ok := f["dimension"]; ok {
		k.dims = p.dimension(v.val, k.what)
	} else {
		p.errorf(n, "%s has no dimension (use %q for one limit shared by every request, or an identity value such as \"api_key\")", k.what, GlobalDimension)
	}
	if len(k.dims) == 1 {
		k.tierDim = k.dims[0]
	}
	if td, ok := f["tier_dimension"]; ok {
		k.tierDim = p.str(td.val, k.what+" tier_dimension")
		if err := validDimension(k.tierDim); err != nil {
			p.errorf(td.val, "%s tier_dimension %v", k.what, err)
		} else if k.tierDim == GlobalDimension {
			p.errorf(td.val, "%s tier_dimension cannot be %q: tiers are assigned per identity", k.what, GlobalDimension)
		}
	}
	return k, true
}

// tierLimits parses a tiers mapping whose overrides may only set limit
// (lo..hi), returning tier → limit.
func (p *parser) tierLimits(t field, k named, c *Config, lo, hi int64) map[string]int64 {
	n := t.val
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s tiers must be a mapping of tier name to limits, got %s", k.what, yamlerr.Describe(n))
		return nil
	}
	if k.tierDim == "" {
		p.errorf(t.key, "%s has tier overrides but no tier_dimension saying whose tier applies (its dimension is not a single identity value)", k.what)
		return nil
	}
	out := map[string]int64{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		tier := key.Value
		if !c.HasTier(tier) {
			p.errorf(key, "%s: tier %q is not defined (tiers: %s)", k.what, tier, strings.Join(c.tiers, ", "))
			continue
		}
		if _, dup := out[tier]; dup {
			p.errorf(key, "%s: tier %q appears twice", k.what, tier)
			continue
		}
		tw := fmt.Sprintf("%s tier %q", k.what, tier)
		f := p.fields(v, tw, "limit")
		if v.Kind != yaml.MappingNode {
			continue
		}
		x, ok := f["limit"]
		if !ok {
			p.errorf(v, "%s overrides nothing (set limit)", tw)
			continue
		}
		if l, ok := p.integer(x.val, tw+" limit", lo, hi); ok {
			out[tier] = l
		}
	}
	return out
}

// quota parses and validates one entry of the quotas list.
func (p *parser) quota(n *yaml.Node, c *Config) *Quota {
	f := p.fields(n, "a quota", quotaFields...)
	if n.Kind != yaml.MappingNode {
		return nil
	}
	bad := p.found
	k, ok := p.keyed(n, f, "quota")
	if !ok {
		return nil
	}
	q := &Quota{Name: k.name, Dimensions: k.dims, TierDimension: k.tierDim, SoftThreshold: DefaultSoftThreshold, Hold: DefaultHold}
	q.base.Name = k.name
	if v, ok := f["limit"]; ok {
		q.base.Limit, _ = p.integer(v.val, k.what+" limit", 1, floodgate.MaxLimit)
	} else {
		p.errorf(n, "%s has no limit", k.what)
	}
	// The calendar fields are those of a quota layer.
	var cal floodgate.Policy
	p.calendar(n, f, &cal, k.what)
	q.base.Calendar = cal.Calendar
	if v, ok := f["soft_threshold"]; ok {
		if s, ok := p.unquoted(v.val, k.what+" soft_threshold", "a fraction"); ok {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || !(x > 0 && x <= 1) {
				p.errorf(v.val, "%s soft_threshold must be a fraction of the limit above 0 and at most 1 (e.g. 0.8), got %q", k.what, s)
			}
			q.SoftThreshold = x
		}
	}
	if v, ok := f["hold"]; ok {
		if d, ok := p.duration(v.val, k.what+" hold", time.Millisecond, floodgate.MaxWindow); ok {
			if d < time.Millisecond || d > floodgate.MaxWindow {
				p.errorf(v.val, "%s hold %s out of range 1ms..%s", k.what, FormatDuration(d), FormatDuration(floodgate.MaxWindow))
			}
			q.Hold = d
		}
	}
	if p.found > bad {
		return nil
	}
	if err := q.base.Validate(); err != nil {
		p.errorf(n, "%s: %v", k.what, err)
		return nil
	}
	if t, ok := f["tiers"]; ok {
		limits := p.tierLimits(t, k, c, 1, floodgate.MaxLimit)
		q.overrides = make(map[string]quota.Policy, len(limits))
		for tier, l := range limits {
			pt := q.base
			pt.Limit = l
			q.overrides[tier] = pt
		}
	}
	if p.found > bad {
		return nil
	}
	return q
}

// quotas parses the quotas list, if any.
func (p *parser) quotas(f map[string]field, c *Config) {
	qs, ok := f["quotas"]
	if !ok {
		return
	}
	items := p.list(qs.val, "quotas")
	if len(items) == 0 && qs.val.Kind == yaml.SequenceNode {
		p.errorf(qs.val, "quotas is empty: define at least one quota, or remove the field")
	}
	if len(items) > MaxQuotas {
		p.errorf(qs.val, "%d quotas (max %d)", len(items), MaxQuotas)
		return
	}
	for _, it := range items {
		q := p.quota(resolve(it), c)
		if q == nil {
			continue
		}
		if _, dup := c.quotaByName[q.Name]; dup {
			p.errorf(it, "quota %q is defined twice", q.Name)
			continue
		}
		c.quotaByName[q.Name] = q
		c.quotas = append(c.quotas, q)
	}
}
