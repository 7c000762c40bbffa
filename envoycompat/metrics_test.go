package envoycompat

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsBounded: past the series cap, new (domain, key) pairs and
// unknown domains are counted under "_other" instead of growing the
// label space.
func TestMetricsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.max = 2
	for _, k := range []string{"d.a", "d.b", "d.c", "e.a", "d.a"} {
		m.add(&Limit{StatKey: k}, statTotalHits, 1)
	}
	for _, d := range []string{"x", "y", "z", "x"} {
		m.domainNotFound(d)
	}
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("d", "a", statTotalHits)); got != 2 {
		t.Errorf("d.a = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("d", otherLabel, statTotalHits)); got != 1 {
		t.Errorf("d._other = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.perLimit.WithLabelValues("e", otherLabel, statTotalHits)); got != 1 {
		t.Errorf("e._other = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.perLimit); got != 4 {
		t.Errorf("%d per-limit series, want 4 (2 pairs and 2 overflow)", got)
	}
	if got := testutil.ToFloat64(m.notFound.WithLabelValues(otherLabel)); got != 1 {
		t.Errorf("domain _other = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.notFound); got != 3 {
		t.Errorf("%d domain series, want 3", got)
	}
}
