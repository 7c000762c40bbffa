package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// Each sentinel gauge's sample, as serve and envoy-compat export it for
// their main Redis client.
const (
	answeringSample = `floodgate_sentinels_answering{client="redis"}`
	majoritySample  = `floodgate_sentinel_majority{client="redis"}`
	sentinelsSample = `floodgate_sentinels{client="redis"}`
)

// stopSentinels stops every sentinel of s, the primary and replica left
// up.
func stopSentinels(s *redistest.Sentinel) {
	for _, n := range s.Sentinels {
		n.Stop()
	}
}

// TestServeSentinelsDownSignals: with every sentinel stopped and the
// primary up, serve goes on deciding on the primary (documented), and
// says that a failover would not be followed: floodgate_sentinels_answering
// drops to 0, floodgate_sentinel_majority to 0, and /readyz, still 200
// ready, reports the sentinels with a warning. An outside walk (serve
// --redis-sentinel, three sentinels killed) found one WARN log line the
// only signal: no metric, no readiness detail, no alert.
func TestServeSentinelsDownSignals(t *testing.T) {
	s := redistest.StartSentinel(t)
	svc := startService(t, "--prefix", "sd", "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName)
	defer svc.stop(t)
	waitUntil(t, "the three sentinels answering, a majority", func() bool {
		return metricValue(t, svc.url, answeringSample) == 3 && metricValue(t, svc.url, majoritySample) == 1
	})
	if got := metricValue(t, svc.url, sentinelsSample); got != 3 {
		t.Errorf("%s = %v, want 3", sentinelsSample, got)
	}
	code, body := readyz(t, svc.url)
	if code != 200 || !strings.Contains(body, `"sentinels":{"configured":3,"answering":3,"majority":true,"primary":"`+s.Primary.Addr+`"}`) {
		t.Fatalf("/readyz with the sentinels up: %d %s", code, body)
	}

	stopSentinels(s)
	waitUntil(t, "no sentinel answering, no majority", func() bool {
		return metricValue(t, svc.url, answeringSample) == 0 && metricValue(t, svc.url, majoritySample) == 0
	})
	code, body = readyz(t, svc.url)
	var r struct {
		Status    string `json:"status"`
		Sentinels struct {
			Configured int    `json:"configured"`
			Answering  int    `json:"answering"`
			Majority   bool   `json:"majority"`
			Primary    string `json:"primary"`
			Warning    string `json:"warning"`
		} `json:"sentinels"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/readyz: %v: %s", err, body)
	}
	if code != 200 || r.Status != "ready" {
		t.Errorf("/readyz with the sentinels down and the primary up: %d %s, want 200 ready", code, body)
	}
	if r.Sentinels.Configured != 3 || r.Sentinels.Answering != 0 || r.Sentinels.Majority || r.Sentinels.Primary != s.Primary.Addr ||
		!strings.Contains(r.Sentinels.Warning, "a failover is not followed") {
		t.Errorf("/readyz sentinels %+v, want 3 configured, 0 answering, no majority, primary %s and a warning", r.Sentinels, s.Primary.Addr)
	}
	if code, res := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "login", Identity: map[string]string{"account": "a", "ip": "192.0.2.1"}}); code != 200 || res.Degraded {
		t.Errorf("a check with the sentinels down: %d %+v, want decided on the primary", code, res)
	}
}

// TestEnvoyCompatSentinelsDownMetric: envoy-compat in sentinel mode
// (REDIS_TYPE=sentinel) exports the same gauges on its debug /metrics,
// and they drop to 0 once every sentinel is stopped.
func TestEnvoyCompatSentinelsDownMetric(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(root, "config", "d.yaml"),
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	s := redistest.StartSentinel(t)
	p := startCompat(t, "REDIS_TYPE=sentinel", "REDIS_URL="+s.MasterName+","+strings.Join(s.SentinelAddrs, ","), "REDIS_SOCKET_TYPE=tcp", "RUNTIME_ROOT="+root)
	debug := "http://" + p.debug
	waitUntil(t, "the three sentinels answering, a majority", func() bool {
		return metricValue(t, debug, answeringSample) == 3 && metricValue(t, debug, majoritySample) == 1
	})
	stopSentinels(s)
	waitUntil(t, "no sentinel answering, no majority", func() bool {
		return metricValue(t, debug, answeringSample) == 0 && metricValue(t, debug, majoritySample) == 0
	})
	if got := metricValue(t, debug, sentinelsSample); got != 3 {
		t.Errorf("%s = %v, want 3", sentinelsSample, got)
	}
}
