package doctor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestScanCapSaidInPasses: with the scan stopped at --scan-max-keys, the
// key checks' passes read as if they covered every key ("every one of
// 10000 keys has a TTL"): they now say they judged a sample.
func TestScanCapSaidInPasses(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "cap", testConfig)
	traffic(t, client, "cap", cfg)
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "cap", Scan: doctor.ScanOptions{MaxKeys: 3, Count: 1}})
	want(t, rep, doctor.GroupKeys, "scan", doctor.Info, "key cap 3 reached")
	want(t, rep, doctor.GroupKeys, "ttl", doctor.Pass, "of the 3 keys sampled: every one of 3 keys has a TTL", "so keys beyond were not checked")
}

// TestMemoryOverMaxmemory: a primary over its maxmemory was said to refuse
// writes "soon"; it refuses them now.
func TestMemoryOverMaxmemory(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	if err := srv.Client(t).ConfigSet(context.Background(), "maxmemory", "100000").Err(); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "mm"})
	c := want(t, rep, doctor.GroupRedis, "memory", doctor.Fail, "1 primary is at or over maxmemory: writes are being refused now")
	if strings.Contains(c.Summary, "soon") {
		t.Errorf("summary %q", c.Summary)
	}
}

// TestPrometheusAnswerOverCap: an answer over doctor's 16 MiB cap was cut
// and reported as "unexpected end of JSON input"; it is now said to be
// over the cap.
func TestPrometheusAnswerOverCap(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	big := `{"status":"success","data":{"result":[],"pad":"` + strings.Repeat("x", 17<<20) + `"}}`
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(big))
	}))
	defer prom.Close()
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "pc", PrometheusURL: prom.URL})
	for _, name := range []string{"scraped", "alert-rules"} {
		c := want(t, rep, doctor.GroupMonitoring, name, doctor.Fail, "answered more than 16 MiB", "over doctor's cap")
		if strings.Contains(c.Summary, "unexpected end of JSON") || !strings.Contains(c.Fix, "at most 16 MiB") {
			t.Errorf("%s: %q, fix %q", name, c.Summary, c.Fix)
		}
	}
}
