package servicebench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// metricsText is an excerpt of floodgate's /metrics (serve's and
// envoy-compat's series in one), with a label value holding a brace and
// a space, and a sample with a timestamp.
const metricsText = `# HELP rate_limit_fallback_total Decisions taken by a failure mode instead of the primary store, by mode and reason.
# TYPE rate_limit_fallback_total counter
rate_limit_fallback_total{mode="local",reason="timeout"} 12
rate_limit_fallback_total{mode="local",reason="breaker_open"} 30
rate_limit_fallback_total{mode="open",reason="timeout"} 0
# TYPE floodgate_degraded_responses_total counter
floodgate_degraded_responses_total{mode="local"} 40
# TYPE floodgate_envoy_hits_total counter
floodgate_envoy_hits_total{domain="api",key="user_}x y",stat="total_hits"} 1000
floodgate_envoy_hits_total{domain="api",key="user",stat="over_limit_with_local_cache"} 7 1733112000000
floodgate_envoy_hits_total{domain="other",key="user",stat="over_limit_with_local_cache"} 2
go_goroutines 17

`

func TestScrapeNotByRedis(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(metricsText)) })
	mux.HandleFunc("/broken", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("rate_limit_fallback_total{mode=\"local\" 3\n"))
	})
	mux.HandleFunc("/down", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no metrics here", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := context.Background()

	tests := []struct {
		service Service
		url     string
		want    float64
	}{
		// serve: the fallback store's count (42) beats the degraded HTTP
		// answers (40), which do not count the gRPC ones.
		{Serve, srv.URL + "/metrics", 42},
		{Compat, srv.URL + "/metrics", 9},
		{Theirs, srv.URL + "/metrics", 0},
		{Serve, "", 0}, // no metrics to read
	}
	for _, tt := range tests {
		got, err := fallbackCount(ctx, tt.service, tt.url)
		if err != nil || got != tt.want {
			t.Errorf("%v at %q: %v, %v; want %v", tt.service, tt.url, got, err, tt.want)
		}
	}
	for path, want := range map[string]string{"/broken": "unclosed labels", "/down": "503"} {
		if _, err := fallbackCount(ctx, Serve, srv.URL+path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", path, err, want)
		}
	}
}

func TestParseMetricsErrors(t *testing.T) {
	for _, bad := range []string{"lonely_name", "x{a=\"b\"}", "x{a=\"b\"} twelve", "{a=\"b\"} 1"} {
		if ss, err := parseMetrics(bad + "\n"); err == nil {
			t.Errorf("%q: %+v, want an error", bad, ss)
		}
	}
}

func TestParseCommandStats(t *testing.T) {
	// INFO stats commandstats of a serve cell: scripts, the data commands
	// they ran, and housekeeping that touches no key.
	info := "# Stats\r\ntotal_commands_processed:2611\r\n\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=100,usec=900,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=1,usec=20,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=1200,usec=300,usec_per_call=0.25,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_set:calls=1200,usec=600,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_incrby:calls=5,usec=5,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_script|load:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=4,usec=4,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_time:calls=90,usec=9,usec_per_call=0.10,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hello:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if want := (commandCounts{Scripts: 101, Keyed: 2405}); err != nil || got != want {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"cmdstat_get:usec=3\r\n", "cmdstat_get:calls=x,usec=3\r\n"} {
		if _, err := parseCommandStats(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestKeyedShort(t *testing.T) {
	tests := []struct {
		decisions, keyed int64
		want             bool
	}{
		{1000, 2000, false},
		{1000, 1900, false}, // 5% off: the window's edges
		{1000, 1899, true},
		{1000, 890, true}, // half the decisions taken elsewhere
		{0, 0, false},
	}
	for _, tt := range tests {
		if got := keyedShort(Cell{Decisions: tt.decisions, KeyedCommands: tt.keyed}); got != tt.want {
			t.Errorf("%d keyed commands for %d decisions: short %v, want %v", tt.keyed, tt.decisions, got, tt.want)
		}
	}
}
