package server

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// Breaker runs the service's own calls to the store's backend (quota and
// lease operations; tier lookups go through config.RedisAssignments'
// Guard) through the circuit breaker that guards decisions, so that they
// are not made while it is open, their failures open it, and their
// successful writes keep it closed as successful decisions do.
// *fallback.Store implements it.
type Breaker interface {
	// CallWrite runs fn unless the breaker of key's partition ("" for
	// the default one) is open, and returns fn's error (or the
	// breaker's). A success for which fn reports wrote vouches for the
	// backend's health (see fallback.Store.CallWrite).
	CallWrite(ctx context.Context, key string, fn func(ctx context.Context) (wrote bool, err error)) error
}

// LastKnownTiers is implemented by Assignments that can tell the last
// tier they saw for an identity, however old (config.RedisAssignments):
// the tier used when a lookup fails.
type LastKnownTiers interface {
	LastKnown(dimension, value string) (tier string, ok, found bool)
}

// guard runs fn, a quota or lease operation on identity's keys, through
// the breaker when there is one: on a Redis Cluster, the breaker of the
// primary serving identity's slot (the keys of quotas and leases carry the
// identity's hash tag, as floodgate.Key's do), so that one primary failing
// does not stop the operations of identities on the others. Errors that
// say nothing about the backend's health (bad input, a lost quota state,
// an already settled id, a lost lease) do not count toward opening it. fn
// reports wrote when its success means the primary accepted a write that
// a Redis out of memory refuses (a lease taken, a quota charged): such a
// success keeps the breaker closed, as a successful decision does, so that
// a workload of quota and lease calls alone does not open it on failures
// scattered among its successes; other successes (a release, a status
// read) are neutral.
func (s *Server) guard(ctx context.Context, identity string, fn func(ctx context.Context) (wrote bool, err error)) error {
	if s.opts.Breaker == nil {
		_, err := fn(ctx)
		return err
	}
	var opErr error
	err := s.opts.Breaker.CallWrite(ctx, "{"+floodgate.EncodeIdentity(identity)+"}", func(ctx context.Context) (bool, error) {
		var wrote bool
		wrote, opErr = fn(ctx)
		if isLogicalError(opErr) {
			return false, nil
		}
		return wrote, opErr
	})
	if opErr != nil {
		return opErr
	}
	return err
}

// MaxOpenReleases bounds the lease releases attempted at once while the
// breaker is open (see guardRelease); one beyond it is refused at once,
// as the breaker refuses other operations (503 store-unavailable: the
// lease is still held, release it again later).
const MaxOpenReleases = 4

// guardRelease is guard for a lease release, which is also attempted
// while the breaker is open: it deletes, which a Redis out of memory
// allows (the breaker's probe, a write, keeps failing there, so the
// breaker refused every release until Redis had memory again), and a
// release not made leaves a slot taken until its lease_ttl ends. Such an
// attempt does not count toward the breaker; it is bounded by ctx (the
// decision timeout), and at most MaxOpenReleases run at once: against a
// frozen Redis each waits out its whole deadline holding a pooled
// connection (an outside walk saw 300 concurrent releases of made-up
// lease ids take 1.0-1.65 s each, every connection of the pool busy, and
// the goroutines grow from 17 to 279).
func (s *Server) guardRelease(ctx context.Context, identity string, fn func(ctx context.Context) (wrote bool, err error)) error {
	err := s.guard(ctx, identity, fn)
	if !errors.Is(err, fallback.ErrBreakerOpen) {
		return err
	}
	select {
	case s.openReleases <- struct{}{}:
	default:
		return err
	}
	defer func() { <-s.openReleases }()
	_, err = fn(ctx)
	return err
}

// isLogicalError reports errors that come with an answer from the store,
// or from bad input, rather than from a failing backend. An operation the
// primary applied but too few replicas confirmed (replicawait), or one not
// sent because too many were waiting for replicas, is one: the primary is
// healthy, and opening its breaker would send the rate limit decisions,
// which never wait for replicas, to the fallback.
func isLogicalError(err error) bool {
	return errors.Is(err, replicawait.ErrNotReplicated) || errors.Is(err, replicawait.ErrBusy) || errors.Is(err, floodgate.ErrForeignValue) || errors.Is(err, floodgate.ErrInvalidKey) || errors.Is(err, floodgate.ErrInvalidCost) ||
		errors.Is(err, floodgate.ErrInvalidPolicy) || errors.Is(err, quota.ErrQuotaStateLost) ||
		errors.Is(err, quota.ErrAlreadySettled) || errors.Is(err, concurrency.ErrLeaseLost) ||
		errors.Is(err, config.ErrInvalid)
}

// tierFor returns the tier applying to a decision keyed by values: the
// tier assigned to the value of tierDim when the limits are tiered and
// the assignment names a configured tier, the default tier otherwise. ctx
// carries the request's decision deadline; the lookup gets at most
// LookupTimeout of it, and its time comes out of the decision's fallback
// budget. A failed lookup (Redis down, slow, or its breaker open) uses the
// last tier seen for the identity when the Assignments keep one
// (LastKnownTiers), else the default tier: limits stay enforced. Failures
// are counted and logged at most once per WarnEvery. what names the
// policy in the log.
func (s *Server) tierFor(ctx context.Context, cfg *config.Config, what string, tiered bool, tierDim string, values map[string]string) string {
	return s.lookupTier(ctx, cfg, what, tiered, tierDim, values, true)
}

// operationTier is tierFor for a quota or lease operation, whose lookup
// is bounded by ctx (the operation's decision deadline) alone: the
// operation has no fallback and waits for Redis up to that deadline
// anyway, so cutting its lookup at the fallback's budget would only give
// it the last known or default tier while Redis is merely slow (a CPU
// saturated by hundreds of concurrent acquires), and count a failure
// toward opening the breaker. what names the quota or limiter in the log.
func (s *Server) operationTier(ctx context.Context, cfg *config.Config, what string, tiered bool, tierDim string, values map[string]string) string {
	return s.lookupTier(ctx, cfg, what, tiered, tierDim, values, false)
}

// lookupTier is tierFor, with the lookup bounded by LookupTimeout and
// charged to the decision's budget when budgeted, by ctx alone otherwise.
func (s *Server) lookupTier(ctx context.Context, cfg *config.Config, what string, tiered bool, tierDim string, values map[string]string, budgeted bool) string {
	if !tiered {
		return cfg.DefaultTier()
	}
	v, ok := values[tierDim]
	if !ok {
		return cfg.DefaultTier()
	}
	var t string
	var err error
	if budgeted {
		t, ok, err = s.budgetedTier(ctx, tierDim, v)
	} else {
		t, ok, err = s.assign.Tier(ctx, tierDim, v)
	}
	if err != nil {
		s.metrics.tierErrors.Inc()
		used := "default"
		t, ok = "", false
		if lk, can := s.assign.(LastKnownTiers); can {
			var found bool
			if t, ok, found = lk.LastKnown(tierDim, v); found {
				used = "last_known"
				s.metrics.tierStale.Inc()
			}
		}
		s.warn.Warn("tier lookup failed", "tier lookup failed; using the last known tier, or the default tier",
			"policy", what, "used", used, "error", err)
	}
	if !ok {
		return cfg.DefaultTier()
	}
	if !cfg.HasTier(t) {
		// Assigned, but to a tier this configuration does not define
		// (a typo such as "PRO" for "pro", or a tier since removed):
		// the identity gets the default tier's limits, which may be a
		// customer's downgrade, so say so.
		s.metrics.tierUnknown.Inc()
		s.warn.Warn("unknown tier", "unknown tier: an identity is assigned a tier the configuration does not define; using the default tier",
			"policy", what, "dimension", tierDim, "tier", clip.Text(t, 64), "default_tier", cfg.DefaultTier(), "configured", cfg.Tiers())
		return cfg.DefaultTier()
	}
	return t
}

// budgetedTier looks the tier of value under tierDim up within
// LookupTimeout of ctx, and spends the lookup's time from the decision's
// fallback budget (when ctx carries the decision's Outcome): with Redis
// stalled, a request waits one budget, not one for the lookup and one
// more for the decision.
func (s *Server) budgetedTier(ctx context.Context, tierDim, v string) (string, bool, error) {
	// A shared deadline, as for the request's (decisionContext): a tiered
	// request looks its tier up on every decision, mostly from a cache.
	start := time.Now()
	lctx, cancel := s.ticks.WithTimeout(ctx, start, s.opts.LookupTimeout)
	t, ok, err := s.assign.Tier(lctx, tierDim, v)
	// A lookup that reached its own deadline spent all of it (shared
	// deadline timers may fire up to a millisecond early).
	spent := time.Since(start)
	if errors.Is(lctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		spent = max(spent, s.opts.LookupTimeout)
	}
	cancel()
	fallback.SpendBudget(ctx, spent)
	return t, ok, err
}
