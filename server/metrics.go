package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// serverMetrics are the service's own metrics, next to package metrics'
// (allowed/denied counters and the top denied identities). Label values
// come from the configuration (policy, layer) or closed sets, never from
// identities.
type serverMetrics struct {
	shadowDenied *prometheus.CounterVec
	errors       *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	tierErrors   prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{
		shadowDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_shadow_denied_total",
			Help: "Requests a shadow layer would have denied (and did not), by policy and layer.",
		}, []string{"policy", "layer"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decision_errors_total",
			Help: "Decisions that failed, by reason: store_unavailable, indeterminate, timeout or internal.",
		}, []string{"reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_rejected_total",
			Help: "HTTP requests rejected before any decision, by problem type.",
		}, []string{"problem"}),
		tierErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_tier_lookup_errors_total",
			Help: "Tier assignment lookups that failed (the default tier was used).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.shadowDenied, m.errors, m.rejected, m.tierErrors} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("server: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}
