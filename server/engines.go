package server

import (
	"fmt"

	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/quota"
)

// engines are the quota.Quota and concurrency.Limiter values of one
// configuration: one per quota or limit and per tier that overrides it. A
// Server builds them on the first request after a reload and keeps them
// until the next; they are immutable.
type engines struct {
	cfg      *config.Config
	quotas   map[tierKey]*quota.Quota
	limiters map[tierKey]*concurrency.Limiter
}

// tierKey names one built engine: a quota or limit and a tier ("" for the
// base limits, shared by every tier without an override).
type tierKey struct{ name, tier string }

// enginesFor returns the engines of cfg, building them if cfg is not the
// configuration they were last built for.
func (s *Server) enginesFor(cfg *config.Config) (*engines, error) {
	if e := s.eng.Load(); e != nil && e.cfg == cfg {
		return e, nil
	}
	e := &engines{cfg: cfg, quotas: map[tierKey]*quota.Quota{}, limiters: map[tierKey]*concurrency.Limiter{}}
	prefix := s.lim.Prefix()
	for _, q := range cfg.Quotas() {
		for _, tier := range append([]string{""}, cfg.Tiers()...) {
			p := q.Policy(tier)
			if tier != "" && p == q.Policy("") {
				continue
			}
			opts := q.Options()
			opts.Prefix, opts.Clock = prefix, s.opts.Clock
			built, err := quota.New(s.quotaStore, p, opts)
			if err != nil {
				return nil, fmt.Errorf("server: quota %q tier %q: %w", q.Name, tier, err)
			}
			e.quotas[tierKey{q.Name, tier}] = built
		}
	}
	for _, l := range cfg.ConcurrencyLimits() {
		for _, tier := range append([]string{""}, cfg.Tiers()...) {
			p := l.Policy(tier)
			if tier != "" && p == l.Policy("") {
				continue
			}
			built, err := concurrency.New(s.leaseStore, p, concurrency.Options{Prefix: prefix, Clock: s.opts.Clock})
			if err != nil {
				return nil, fmt.Errorf("server: concurrency limit %q tier %q: %w", l.Name, tier, err)
			}
			e.limiters[tierKey{l.Name, tier}] = built
		}
	}
	s.eng.Store(e)
	return e, nil
}

// quota returns the quota called name under tier.
func (e *engines) quota(name, tier string) *quota.Quota {
	if q, ok := e.quotas[tierKey{name, tier}]; ok {
		return q
	}
	return e.quotas[tierKey{name, ""}]
}

// limiter returns the concurrency limiter called name under tier.
func (e *engines) limiter(name, tier string) *concurrency.Limiter {
	if l, ok := e.limiters[tierKey{name, tier}]; ok {
		return l
	}
	return e.limiters[tierKey{name, ""}]
}
