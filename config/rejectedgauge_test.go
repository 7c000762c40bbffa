package config_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/config"
)

// gaugeOf returns the gauge name{source}, or -1 when the series does not
// exist.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name, source string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

const rejectedGauge = "floodgate_config_source_rejected"

// TestSourceRejectedGauge: floodgate_config_source_rejected{source} is 1
// while a source's latest file is rejected and 0 again once it holds the
// active configuration again (not counted as applied, for the policies
// file and the Envoy descriptors alike: the success timestamp stays) or a
// new one that applies. RateLimitConfigRejected fires on it.
func TestSourceRejectedGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	policies := filepath.Join(dir, "floodgate.yaml")
	envoy := filepath.Join(dir, "envoy.yaml")
	writeFile(t, policies, doc("1", 10))
	writeFile(t, envoy, envoyDoc("a", 1))

	initial, err := config.LoadFile(policies)
	if err != nil {
		t.Fatal(err)
	}
	h, err := config.NewHolder(initial)
	if err != nil {
		t.Fatal(err)
	}
	r, err := config.NewReloader(h, config.ReloaderOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	er, err := config.NewEnvoyReloader([]string{envoy}, config.ReloaderOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.WatchFile(ctx, policies, 10*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	lastOK := "floodgate_config_last_reload_success_timestamp_seconds"
	for _, tc := range []struct {
		source string
		path   string
		active string
		broken string
		newer  string
		reload func()
	}{
		{
			source: config.SourcePolicies, path: policies,
			active: doc("1", 10), broken: "policies: [\n", newer: doc("2", 20),
		},
		{
			source: config.SourceEnvoy, path: envoy,
			active: envoyDoc("a", 1), broken: "domain: [\n", newer: envoyDoc("a", 5),
			reload: func() { _, _ = er.Reload() },
		},
	} {
		t.Run(tc.source, func(t *testing.T) {
			// settle waits until the source's counters read applied and
			// invalid (Reload is called directly for the Envoy source,
			// WatchFile polls the policies file).
			settle := func(what string, applied, invalid int) {
				t.Helper()
				waitFor(t, what, func() bool {
					if tc.reload != nil {
						tc.reload()
					}
					return reloadsOf(t, reg, tc.source, config.ResultApplied) == applied &&
						reloadsOf(t, reg, tc.source, config.ResultInvalid) == invalid
				})
			}
			if got := gaugeOf(t, reg, rejectedGauge, tc.source); got != 0 {
				t.Fatalf("at start: %s = %v, want 0", rejectedGauge, got)
			}
			started := gaugeOf(t, reg, lastOK, tc.source)

			writeFile(t, tc.path, tc.broken)
			settle("the broken file to be rejected", 0, 1)
			if got := gaugeOf(t, reg, rejectedGauge, tc.source); got != 1 {
				t.Fatalf("rejected: %s = %v, want 1", rejectedGauge, got)
			}

			// The active content restored: no longer rejected, and not
			// an apply.
			writeFile(t, tc.path, tc.active)
			waitFor(t, "the restored file to clear the gauge", func() bool {
				if tc.reload != nil {
					tc.reload()
				}
				return gaugeOf(t, reg, rejectedGauge, tc.source) == 0
			})
			if a := reloadsOf(t, reg, tc.source, config.ResultApplied); a != 0 {
				t.Errorf("restoring the active content counted %d applied, want 0", a)
			}
			if got := gaugeOf(t, reg, lastOK, tc.source); got != started {
				t.Errorf("restoring the active content moved %s from %v to %v", lastOK, started, got)
			}

			// Rejected again, then a new valid file: applied clears it.
			writeFile(t, tc.path, tc.broken)
			settle("the broken file to be rejected again", 0, 2)
			if got := gaugeOf(t, reg, rejectedGauge, tc.source); got != 1 {
				t.Fatalf("rejected again: %s = %v, want 1", rejectedGauge, got)
			}
			writeFile(t, tc.path, tc.newer)
			settle("the new file to apply", 1, 2)
			if got := gaugeOf(t, reg, rejectedGauge, tc.source); got != 0 {
				t.Fatalf("applied: %s = %v, want 0", rejectedGauge, got)
			}
			if got := gaugeOf(t, reg, lastOK, tc.source); got <= started {
				t.Errorf("applied: %s = %v, not after %v", lastOK, got, started)
			}
		})
	}
}
