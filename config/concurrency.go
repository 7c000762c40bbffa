package config

import (
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate-rl/floodgate/concurrency"
)

// MaxConcurrencyLimits is the most concurrency limits one configuration may
// define.
const MaxConcurrencyLimits = 1000

// ConcurrencyLimit is one cap on requests in flight (package concurrency):
// at most a limit of leases per identity of a dimension at once, each
// freeing itself after its lease TTL, served by the /v1/concurrency/
// endpoints with acquire, release and renew.
type ConcurrencyLimit struct {
	// Name identifies the limit in requests and namespaces its keys, e.g.
	// "reports".
	Name string
	// Dimensions are the identity values that key the limit, e.g.
	// ["user"]; empty for one limit shared by every request.
	Dimensions []string
	// TierDimension is the identity value whose assigned tier sets the
	// limit (the single dimension unless configured); "" when none.
	TierDimension string

	base      concurrency.Policy
	overrides map[string]concurrency.Policy
}

// Dimension returns the limit's dimension as written: "global" or the
// dimension names joined with "+".
func (l *ConcurrencyLimit) Dimension() string { return dimensionName(l.Dimensions) }

// Policy returns the limit under tier (the base limit when the tier has no
// override). Every tier shares one name, so leases taken under one tier
// count under another.
func (l *ConcurrencyLimit) Policy(tier string) concurrency.Policy {
	if p, ok := l.overrides[tier]; ok {
		return p
	}
	return l.base
}

// Tiered reports whether the limit depends on the tier.
func (l *ConcurrencyLimit) Tiered() bool { return l.TierDimension != "" && len(l.overrides) > 0 }

// Identity returns the identity the limit keys on, taken from values
// (dimension → value); "global" for a global limit.
func (l *ConcurrencyLimit) Identity(values map[string]string) (string, error) {
	return identityOf("concurrency limit", l.Name, l.Dimensions, values)
}

// LeaseTTL returns how long a lease of the limit lives unless released or
// renewed.
func (l *ConcurrencyLimit) LeaseTTL() time.Duration { return l.base.LeaseTTL }

var concurrencyFields = []string{"name", "limit", "lease_ttl", "dimension", "tier_dimension", "tiers"}

// concurrency parses the concurrency list, if any.
func (p *parser) concurrency(f map[string]field, c *Config) {
	cs, ok := f["concurrency"]
	if !ok {
		return
	}
	items := p.list(cs.val, "concurrency")
	if len(items) == 0 && cs.val.Kind == yaml.SequenceNode {
		p.errorf(cs.val, "concurrency is empty: define at least one concurrency limit, or remove the field")
	}
	if len(items) > MaxConcurrencyLimits {
		p.errorf(cs.val, "%d concurrency limits (max %d)", len(items), MaxConcurrencyLimits)
		return
	}
	for _, it := range items {
		l := p.concurrencyLimit(resolve(it), c)
		if l == nil {
			continue
		}
		if _, dup := c.limitByName[l.Name]; dup {
			p.errorf(it, "concurrency limit %q is defined twice", l.Name)
			continue
		}
		c.limitByName[l.Name] = l
		c.limits = append(c.limits, l)
	}
}

// concurrencyLimit parses and validates one entry of the concurrency list.
func (p *parser) concurrencyLimit(n *yaml.Node, c *Config) *ConcurrencyLimit {
	f := p.fields(n, "a concurrency limit", concurrencyFields...)
	if n.Kind != yaml.MappingNode {
		return nil
	}
	bad := p.found
	k, ok := p.keyed(n, f, "concurrency limit")
	if !ok {
		return nil
	}
	l := &ConcurrencyLimit{Name: k.name, Dimensions: k.dims, TierDimension: k.tierDim}
	l.base = concurrency.Policy{Name: k.name, LeaseTTL: concurrency.DefaultLeaseTTL}
	if v, ok := f["limit"]; ok {
		l.base.Limit, _ = p.integer(v.val, k.what+" limit", 1, concurrency.MaxLimit)
	} else {
		p.errorf(n, "%s has no limit (the most requests in flight at once)", k.what)
	}
	if v, ok := f["lease_ttl"]; ok {
		if d, ok := p.duration(v.val, k.what+" lease_ttl", time.Millisecond, concurrency.MaxLeaseTTL); ok {
			if d < time.Millisecond || d > concurrency.MaxLeaseTTL {
				p.errorf(v.val, "%s lease_ttl %s out of range 1ms..%s", k.what, FormatDuration(d), FormatDuration(concurrency.MaxLeaseTTL))
			} else if d%time.Microsecond != 0 {
				p.errorf(v.val, "%s lease_ttl %s is not a whole number of microseconds", k.what, FormatDuration(d))
			}
			l.base.LeaseTTL = d
		}
	}
	if p.found > bad {
		return nil
	}
	if err := l.base.Validate(); err != nil {
		p.errorf(n, "%s: %v", k.what, err)
		return nil
	}
	if t, ok := f["tiers"]; ok {
		limits := p.tierLimits(t, k, c, 1, concurrency.MaxLimit)
		l.overrides = make(map[string]concurrency.Policy, len(limits))
		for tier, lim := range limits {
			pt := l.base
			pt.Limit = lim
			l.overrides[tier] = pt
		}
	}
	if p.found > bad {
		return nil
	}
	return l
}
