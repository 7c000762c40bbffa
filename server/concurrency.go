package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/metrics"
)

// AcquireRequest is the body of POST /v1/concurrency/acquire: take one of
// an identity's slots for requests in flight.
type AcquireRequest struct {
	// Limiter names a concurrency limit of the active configuration, e.g.
	// "reports".
	Limiter string `json:"limiter"`
	// Identity maps dimension names to values, e.g. {"user": "42"}; the
	// limit's dimension(s) must be present, others are ignored.
	Identity map[string]string `json:"identity"`
}

// LeaseRequest is the body of POST /v1/concurrency/release and
// /v1/concurrency/renew: a lease taken by an acquire.
type LeaseRequest struct {
	// Limiter and Identity are those of the acquire.
	Limiter  string            `json:"limiter"`
	Identity map[string]string `json:"identity"`
	// LeaseID is the acquire's lease_id.
	LeaseID string `json:"lease_id"`
}

// AcquireResponse is the body of an acquire (HTTP 200; or 429 with
// ?enforce=1 when no slot was free).
type AcquireResponse struct {
	// Acquired reports that a slot was taken; release it with LeaseID
	// when the work is done.
	Acquired bool `json:"acquired"`
	// Limiter and Tier say which limit applied.
	Limiter string `json:"limiter"`
	Tier    string `json:"tier"`
	// LeaseID names the slot taken; empty when none was.
	LeaseID string `json:"lease_id,omitempty"`
	// ExpiresAt is when the lease frees its slot by itself unless
	// renewed, in RFC 3339 with milliseconds (UTC); empty when none was
	// taken.
	ExpiresAt string `json:"expires_at,omitempty"`
	// InFlight is the number of live leases after the call, Limit the
	// most allowed at once, Remaining the difference.
	InFlight  int64 `json:"in_flight"`
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	// RetryAfterMS is, when no slot was free, how long until the
	// earliest lease expires by itself, in milliseconds (rounded up): an
	// upper bound, as releases usually free a slot sooner. Zero when
	// acquired.
	RetryAfterMS int64 `json:"retry_after_ms"`
}

// ReleaseResponse is the body of a release.
type ReleaseResponse struct {
	// Released reports that the lease was live and its slot is free now;
	// false when it had already been released or had expired (releasing
	// is idempotent).
	Released bool `json:"released"`
	// Limiter and LeaseID echo the request's.
	Limiter string `json:"limiter"`
	LeaseID string `json:"lease_id"`
}

// RenewResponse is the body of a successful renew. A lease no longer held
// is a 409 problem of type lease-lost instead.
type RenewResponse struct {
	// Renewed is always true: a lease that could not be renewed is a
	// problem instead.
	Renewed bool `json:"renewed"`
	// Limiter and LeaseID echo the request's.
	Limiter string `json:"limiter"`
	LeaseID string `json:"lease_id"`
	// ExpiresAt is the lease's new expiry, as in AcquireResponse.
	ExpiresAt string `json:"expires_at"`
}

// leaseOp is a validated concurrency request.
type leaseOp struct {
	limit    *config.ConcurrencyLimit
	values   map[string]string
	identity string
	leaseID  string
}

func decodeLimiter(cfg *config.Config, name string, values map[string]string) (leaseOp, error) {
	if name == "" {
		return leaseOp{}, badRequest("missing-limiter", "field \"limiter\" is required")
	}
	l, ok := cfg.ConcurrencyLimit(name)
	if !ok {
		return leaseOp{}, badRequest("unknown-limiter", "unknown concurrency limiter %q", clip.Text(name, 80))
	}
	if err := validateIdentity(values); err != nil {
		return leaseOp{}, err
	}
	if err := missingIdentity("concurrency limiter "+strconv.Quote(l.Name), l.Dimensions, values); err != nil {
		return leaseOp{}, err
	}
	id, err := l.Identity(values)
	if err != nil {
		return leaseOp{}, badRequest("invalid-identity", "%s", identityDetail(err))
	}
	return leaseOp{limit: l, values: values, identity: id}, nil
}

func decodeAcquire(cfg *config.Config, body []byte) (leaseOp, error) {
	var r AcquireRequest
	if err := decodeJSON(body, &r, "limiter, identity"); err != nil {
		return leaseOp{}, err
	}
	return decodeLimiter(cfg, r.Limiter, r.Identity)
}

func decodeLease(cfg *config.Config, body []byte) (leaseOp, error) {
	var r LeaseRequest
	if err := decodeJSON(body, &r, "limiter, identity, lease_id"); err != nil {
		return leaseOp{}, err
	}
	op, err := decodeLimiter(cfg, r.Limiter, r.Identity)
	if err != nil {
		return op, err
	}
	if r.LeaseID == "" {
		return op, badRequest("missing-lease-id", "field \"lease_id\" is required: send the lease_id the acquire returned")
	}
	if err := printableID("lease_id", r.LeaseID, concurrency.MaxLeaseIDLen, "invalid-lease-id"); err != nil {
		return op, err
	}
	op.leaseID = r.LeaseID
	return op, nil
}

// leaseTime formats a lease expiry.
func leaseTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// leaseSetup decodes a concurrency request and finds its limiter and tier;
// ctx carries the request's decision deadline.
func (s *Server) leaseSetup(ctx context.Context, w http.ResponseWriter, r *http.Request, decode func(*config.Config, []byte) (leaseOp, error)) (leaseOp, *concurrency.Limiter, string, bool) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return leaseOp{}, nil, "", false
	}
	cfg := s.cfg.Load()
	op, err := decode(cfg, body)
	if err != nil {
		s.fail(w, r, err)
		return op, nil, "", false
	}
	eng, err := s.enginesFor(cfg)
	if err != nil {
		s.fail(w, r, err)
		return op, nil, "", false
	}
	tier := s.operationTier(ctx, cfg, op.limit.Name, op.limit.Tiered(), op.limit.TierDimension, op.values)
	return op, eng.limiter(op.limit.Name, tier), tier, true
}

func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	enforce, err := enforceParam(r.URL.RawQuery)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.decisionContext(r.Context())
	defer cancel()
	op, lim, tier, ok := s.leaseSetup(ctx, w, r, decodeAcquire)
	if !ok {
		return
	}
	var res concurrency.Result
	err = s.guard(ctx, op.identity, func(ctx context.Context) (bool, error) {
		var err error
		res, err = lim.Acquire(ctx, op.identity)
		return res.Allowed, err // a lease taken is a ZADD
	})
	if ue := (*concurrency.UnconfirmedError)(nil); errors.As(err, &ue) {
		// Not s.fail, which would count the problem again, as a
		// rejection: decisionProblem counted it as a decision error.
		p := s.unconfirmedProblem(r.Context(), ue)
		if p.retry {
			w.Header().Set("Retry-After", "1")
		}
		writeProblem(w, p)
		return
	}
	if err != nil {
		s.fail(w, r, s.operationProblem(r.Context(), opAcquire, err))
		return
	}
	// "concurrency:", not "concurrency/": see the quota's key.
	key := "concurrency:" + op.limit.Name + ":" + op.identity
	s.decided.Decision(metrics.Labels{Policy: op.limit.Name, Route: routeOf(r), Tier: tier}, key, res.Allowed)
	resp := AcquireResponse{
		Acquired: res.Allowed, Limiter: op.limit.Name, Tier: tier,
		InFlight: res.InFlight, Limit: res.Limit, Remaining: res.Remaining, RetryAfterMS: ceilMillis(res.RetryAfter),
	}
	if res.Allowed {
		resp.LeaseID, resp.ExpiresAt = res.Lease.ID, leaseTime(res.Lease.Expires)
	}
	setRateHeaders(w.Header(), resp.Limit, resp.Remaining, 0, resp.Acquired, resp.RetryAfterMS)
	status := http.StatusOK
	if enforce && !res.Allowed {
		status = http.StatusTooManyRequests
	}
	writeJSON(w, status, resp)
}

// unconfirmedProblem answers an acquire the Redis primary granted and its
// replicas did not confirm (--redis-wait-replicas): the lease is not
// granted, and was released again or, when that failed, is named so
// that the client can release it. It is logged and counted as an
// indeterminate outcome, as other unconfirmed operations are, and must
// be written as it is (not through fail, which counts a problem again as
// a rejection). The problem asks for Retry-After.
func (s *Server) unconfirmedProblem(ctx context.Context, ue *concurrency.UnconfirmedError) *problemError {
	p := s.decisionProblem(ctx, opAcquire, ue)
	p.retry = true
	if ue.Released {
		p.detail = "the lease was not granted: the Redis primary gave a slot, but fewer of its replicas than --redis-wait-replicas confirmed it in time, so a failover could lose it; the slot has been released again, so nothing is held: acquire again after Retry-After"
		return p
	}
	// Logged at most once per WarnEvery: the decision's log line above
	// is shared by every indeterminate outcome.
	s.warn.Error(ctx, "unconfirmed-release", "releasing an unconfirmed lease failed: its slot stays taken until the client releases it or its lease_ttl ends",
		"limiter", ue.Policy, "lease_id", ue.Lease.ID, "error", ue.ReleaseErr)
	p.detail = "the lease was not granted: the Redis primary gave a slot, but fewer of its replicas than --redis-wait-replicas confirmed it in time, and releasing it again failed; release lease_id (POST /v1/concurrency/release), or the slot stays taken until its lease_ttl ends"
	p.leaseID = ue.Lease.ID
	return p
}

func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.decisionContext(r.Context())
	defer cancel()
	op, lim, _, ok := s.leaseSetup(ctx, w, r, decodeLease)
	if !ok {
		return
	}
	var released bool
	err := s.guardRelease(ctx, op.identity, func(ctx context.Context) (bool, error) {
		var err error
		released, err = lim.Release(ctx, concurrency.Lease{Identity: op.identity, ID: op.leaseID})
		return false, err // a ZREM, which a Redis out of memory allows
	})
	if err != nil {
		s.fail(w, r, s.operationProblem(r.Context(), opRelease, err))
		return
	}
	result := resultNotHeld
	if released {
		result = resultReleased
	}
	s.metrics.releases.WithLabelValues(op.limit.Name, result).Inc()
	writeJSON(w, http.StatusOK, ReleaseResponse{Released: released, Limiter: op.limit.Name, LeaseID: op.leaseID})
}

func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.decisionContext(r.Context())
	defer cancel()
	op, lim, _, ok := s.leaseSetup(ctx, w, r, decodeLease)
	if !ok {
		return
	}
	var lease concurrency.Lease
	err := s.guard(ctx, op.identity, func(ctx context.Context) (bool, error) {
		var err error
		lease, err = lim.Renew(ctx, concurrency.Lease{Identity: op.identity, ID: op.leaseID})
		return err == nil, err // a lease renewed is a ZADD
	})
	if errors.Is(err, concurrency.ErrLeaseLost) {
		s.metrics.renewals.WithLabelValues(op.limit.Name, resultLost).Inc()
		s.fail(w, r, &problemError{status: http.StatusConflict, kind: "lease-lost",
			detail: "lease " + strconv.Quote(clip.Text(op.leaseID, 80)) + " is no longer held (released, or expired and its slot possibly taken): stop the work or acquire a new lease"})
		return
	}
	if err != nil {
		s.fail(w, r, s.operationProblem(r.Context(), opRenew, err))
		return
	}
	s.metrics.renewals.WithLabelValues(op.limit.Name, resultRenewed).Inc()
	writeJSON(w, http.StatusOK, RenewResponse{Renewed: true, Limiter: op.limit.Name, LeaseID: op.leaseID, ExpiresAt: leaseTime(lease.Expires)})
}
