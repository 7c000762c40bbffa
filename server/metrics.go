package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/fallback"
)

// serverMetrics are the service's own metrics, next to package metrics'
// (allowed/denied counters and the top denied identities). Label values
// come from the configuration (policy, layer) or closed sets, never from
// identities.
type serverMetrics struct {
	shadowDenied *prometheus.CounterVec
	errors       *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	grpcRejected *prometheus.CounterVec
	tierErrors   prometheus.Counter
	tierStale    prometheus.Counter
	tierUnknown  prometheus.Counter
	degraded     *prometheus.CounterVec
	releases     *prometheus.CounterVec
	renewals     *prometheus.CounterVec
	// degradedBy holds degraded's children by mode, resolved once so that
	// counting a degraded answer looks nothing up.
	degradedBy [fallback.ModeClosed + 1]prometheus.Counter
}

// The reasons of floodgate_decision_errors_total.
const (
	reasonStoreUnavailable = "store_unavailable"
	reasonIndeterminate    = "indeterminate"
	reasonTimeout          = "timeout"
	reasonInternal         = "internal"
	// reasonForeignValue: a Redis key the operation needs holds a value
	// floodgate did not write (floodgate.ErrForeignValue); Redis is fine.
	reasonForeignValue = "foreign_value"
)

func newServerMetrics(reg prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{
		shadowDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_shadow_denied_total",
			Help: "Requests a shadow layer would have denied (and did not), by policy and layer.",
		}, []string{"policy", "layer"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decision_errors_total",
			Help: "Decisions that failed, by reason: store_unavailable, indeterminate, timeout, foreign_value or internal.",
		}, []string{"reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_rejected_total",
			Help: "HTTP requests rejected before any decision, by problem type.",
		}, []string{"problem"}),
		grpcRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_grpc_rejected_total",
			Help: "gRPC ShouldRateLimit calls refused before any decision, by reason: no_config, domain, descriptors, descriptor, hits_addend, limit_override or message_size.",
		}, []string{"reason"}),
		tierErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_tier_lookup_errors_total",
			Help: "Tier assignment lookups that failed (Redis down or slow, or its breaker open); the last known tier or the default tier was used.",
		}),
		tierStale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_tier_lookup_stale_total",
			Help: "Failed tier lookups answered with the last tier seen for the identity (the others used the default tier).",
		}),
		tierUnknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_tier_unknown_total",
			Help: "Tier lookups that found an assigned tier the configuration does not define (a typo, or a tier removed); the default tier was used.",
		}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_degraded_responses_total",
			Help: "Decisions answered while degraded (taken by the failure mode instead of Redis), by failure mode.",
		}, []string{"mode"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_lease_releases_total",
			Help: "Concurrency lease releases answered, by limiter (label policy, as acquires in rate_limit_allowed_total) and result: released (the lease was live and its slot is free) or not_held (already released, or expired).",
		}, []string{"policy", "result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_lease_renewals_total",
			Help: "Concurrency lease renewals answered, by limiter (label policy) and result: renewed, or lost (the lease was no longer held: 409 lease-lost).",
		}, []string{"policy", "result"}),
	}
	for mode := fallback.ModeLocal; mode <= fallback.ModeClosed; mode++ {
		m.degradedBy[mode] = m.degraded.WithLabelValues(mode.String())
	}
	// Every reason's series exists from the start, at 0, so that a rate
	// (RateLimitDecisionErrors) sees the first failures as an increase.
	for _, reason := range []string{reasonStoreUnavailable, reasonIndeterminate, reasonTimeout, reasonInternal, reasonForeignValue} {
		m.errors.WithLabelValues(reason)
	}
	for _, reason := range envoyrls.Rejections() {
		m.grpcRejected.WithLabelValues(string(reason))
	}
	// Every problem type a request can be refused with exists from the
	// start too, at 0: a series created by the first rejection starts at
	// 1, and increase() over it misses that rejection.
	for _, problem := range rejectionProblems() {
		m.rejected.WithLabelValues(problem)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.shadowDenied, m.errors, m.rejected, m.grpcRejected, m.tierErrors, m.tierStale, m.tierUnknown, m.degraded, m.releases, m.renewals} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("server: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}

// The results of floodgate_lease_releases_total and
// floodgate_lease_renewals_total.
const (
	resultReleased = "released"
	resultNotHeld  = "not_held"
	resultRenewed  = "renewed"
	resultLost     = "lost"
)

// rejectionProblems returns the problem types (Problem.Type without
// ProblemTypePrefix) that floodgate_http_rejected_total counts: those of
// the requests refused before any decision, and of admin requests
// refused. Decision failures (internal, store-*: counted in
// floodgate_decision_errors_total, but for store-unavailable, which the
// admin API answers too) and unknown paths or methods (not-found,
// method-not-allowed) are not among them. TestRejectionProblemsAreComplete
// checks the list against the problems the package constructs.
func rejectionProblems() []string {
	return []string{
		// Request bodies and parameters (400).
		"batch-too-large", "duplicate-field", "invalid-batch", "invalid-cost",
		"invalid-identity", "invalid-lease-id", "invalid-parameter", "invalid-request",
		"invalid-request-id", "invalid-unlock", "malformed-json", "missing-cost",
		"missing-identity", "missing-lease-id", "missing-limiter", "missing-policy",
		"missing-quota", "missing-request-id", "missing-tier", "nothing-to-reset", "unknown-field",
		"unknown-layer", "unknown-limiter", "unknown-policy", "unknown-quota",
		"unknown-tier", "unreadable-body",
		// Transport: bodies, origins, hosts.
		"body-timeout", "body-too-large", "unsupported-content-encoding",
		"cross-origin-request", "host-not-allowed",
		// No configuration yet (serve --config-from-redis).
		"no-configuration",
		// Leases and quotas.
		"lease-lost", "quota-already-settled", "quota-state-lost",
		// The admin API.
		"admin-disabled", "admin-throttled", "unauthorized", "login-guard-disabled",
		"reset-unsupported", "store-unavailable",
	}
}

// countDegraded counts one answer taken by o's failure mode in
// floodgate_degraded_responses_total.
func (m *serverMetrics) countDegraded(o fallback.Outcome) {
	if int(o.Mode) < len(m.degradedBy) && m.degradedBy[o.Mode] != nil {
		m.degradedBy[o.Mode].Inc()
		return
	}
	m.degraded.WithLabelValues(o.Mode.String()).Inc()
}
