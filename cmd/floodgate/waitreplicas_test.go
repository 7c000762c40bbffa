package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeWaitReplicas: with --redis-wait-replicas 1 on a primary that
// has no replica, quota and lease operations are applied but answered 503
// store-not-replicated, never 200; rate limit decisions are not held up
// and the breaker stays closed (they are still decided by Redis). Once a
// replica is attached, the retried reserve is replayed (it was applied
// once) and answered 200.
func TestServeWaitReplicas(t *testing.T) {
	rs := redistest.Start(t)
	svc := startService(t, "--redis", "redis://"+rs.Addr, "--redis-wait-replicas", "1", "--redis-wait-timeout", "30ms")
	defer svc.stop(t)
	if !strings.Contains(svc.Logs(), "fewer replicas connected than --redis-wait-replicas") {
		t.Errorf("no warning at start about the primary without a replica:\n%s", svc.Logs())
	}

	reserve := `{"quota":"llm-tokens","identity":{"api_key":"k1"},"request_id":"job-1","estimate":100}`
	for i := range 10 {
		code, body := postBody(t, svc.url+"/v1/quota/reserve", reserve)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "store-not-replicated") {
			t.Fatalf("reserve #%d without a replica: %d %s; want 503 store-not-replicated", i+1, code, body)
		}
	}
	// A status consumes nothing: it is answered without waiting.
	if code, body := postBody(t, svc.url+"/v1/quota/status", `{"quota":"llm-tokens","identity":{"api_key":"k1"}}`); code != http.StatusOK {
		t.Fatalf("status without a replica: %d %s; want 200", code, body)
	}
	code, body := postBody(t, svc.url+"/v1/concurrency/acquire", `{"limiter":"reports","identity":{"user":"u1"}}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "store-not-replicated") {
		t.Fatalf("acquire without a replica: %d %s; want 503 store-not-replicated", code, body)
	}
	// The primary has the hold, once.
	held, err := rs.Client(t).Keys(context.Background(), "fg:llm-tokens:q:*").Result()
	if err != nil || len(held) == 0 {
		t.Fatalf("no quota keys on the primary: %v %v", held, err)
	}
	for i := range 5 {
		code, body := postBody(t, svc.url+"/v1/check", `{"policy":"api","identity":{"user":"u`+strconv.Itoa(i)+`"}}`)
		if code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
			t.Fatalf("check #%d: %d %s; want 200 allowed", i+1, code, body)
		}
	}
	if got := metricSum(t, svc.url+"/metrics", "rate_limit_fallback_total"); got != 0 {
		t.Fatalf("rate_limit_fallback_total = %v: decisions left Redis because quota operations were not replicated", got)
	}

	redistest.StartReplica(t, rs)
	// Retried as a client would on 503 store-not-replicated: a 30ms WAIT
	// can still expire on a loaded machine (a CI run saw it once), and
	// every retry must be the same single hold.
	for range 20 {
		code, body = postBody(t, svc.url+"/v1/quota/reserve", reserve)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "store-not-replicated") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var r struct {
		Allowed  bool  `json:"allowed"`
		Replayed bool  `json:"replayed"`
		Reserved int64 `json:"reserved"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil || !r.Allowed || !r.Replayed || r.Reserved != 100 {
		t.Fatalf("reserve retried with a replica: %d %s; want 200, replayed, 100 reserved", code, body)
	}
}

func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	return postWith(t, url, body, nil)
}

// postWith is postBody sending the header lines of h too.
func postWith(t *testing.T, url, body string, h http.Header) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// metricSum sums the samples of the metric name (any labels) on url; 0
// when there are none.
func metricSum(t *testing.T, url, name string) float64 {
	t.Helper()
	return metricSumWith(t, http.DefaultClient, url, name)
}

// metricSumWith is metricSum read with c (an HTTPS listener's client).
func metricSumWith(t *testing.T, c *http.Client, url, name string) float64 {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}
