package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/server"
)

// metricValue scrapes url's /metrics and returns the value of the sample
// whose line starts with name (labels included, if given).
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics:\n%s", name, body)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestServeMemoryMaxKeysEvicts runs the real binary in memory mode with a
// small --memory-max-keys and floods it with batches of unique login
// identities: no decision fails, an account decided before the flood keeps
// its count, and the evictions are on /metrics.
func TestServeMemoryMaxKeysEvicts(t *testing.T) {
	svc := startService(t, "--memory-max-keys", "640")
	alice := map[string]string{"account": "alice", "ip": "192.0.2.1"}
	for range 2 {
		if code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "login", Identity: alice}); code != 200 || !r.Allowed {
			t.Fatalf("alice before the flood: %d %+v", code, r)
		}
	}
	n := 0
	for b := range 30 {
		var req server.BatchRequest
		for range 100 {
			n++
			req.Requests = append(req.Requests, server.CheckRequest{Policy: "login",
				Identity: map[string]string{"account": fmt.Sprint("junk-", n), "ip": fmt.Sprintf("10.0.%d.%d", n>>8&255, n&255)}})
		}
		data, _ := json.Marshal(req)
		resp, err := http.Post(svc.url+"/v1/check/batch", "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(body), `"error"`) {
			t.Fatalf("batch %d: %d %s", b, resp.StatusCode, body)
		}
	}
	if code, r := post(t, svc.url+"/v1/check", server.CheckRequest{Policy: "login", Identity: alice}); code != 200 || !r.Allowed || r.Remaining != 2 {
		t.Fatalf("alice after the flood: %d %+v, want allowed with 2 left", code, r)
	}
	if v := metricValue(t, svc.url, "floodgate_memstore_evictions_total"); v < 1000 {
		t.Fatalf("floodgate_memstore_evictions_total %v, want thousands", v)
	}
	if code, out := runCLI(t, "serve", "--memory-max-keys", "0"); code == 0 || !strings.Contains(out, "--memory-max-keys 0") {
		t.Fatalf("--memory-max-keys 0: exit %d: %s", code, out)
	}
}
