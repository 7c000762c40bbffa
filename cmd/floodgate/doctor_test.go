package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestDoctorExitStatusAndJSON(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	args := []string{"doctor", "--redis", "redis://" + srv.Addr, "--prefix", "dc", "--json", "--latency-samples", "5"}

	var out, errOut bytes.Buffer
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("healthy: exit %d, stderr %s\n%s", code, errOut.String(), out.String())
	}
	// A key without TTL under the prefix makes the run fail.
	if err := srv.Client(t).Set(ctx, "dc:api.per-user:sw:{rx}", "1 1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(ctx, args, &out, &errOut); code != 1 {
		t.Fatalf("key without TTL: exit %d, want 1\n%s", code, out.String())
	}
	var rep struct {
		Worst  string `json:"worst"`
		Checks []struct {
			Group, Name, Status string
		} `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	found := false
	for _, c := range rep.Checks {
		found = found || (c.Group == "Keys" && c.Name == "ttl" && c.Status == "fail")
	}
	if rep.Worst != "fail" || !found {
		t.Fatalf("JSON report: worst %q, Keys/ttl fail %v\n%s", rep.Worst, found, out.String())
	}

	// The text report has no escape codes when not on a terminal.
	out.Reset()
	run(ctx, []string{"doctor", "--redis", "redis://" + srv.Addr, "--prefix", "dc", "--latency-samples", "5"}, &out, &errOut)
	if strings.Contains(out.String(), "\x1b[") || !strings.Contains(out.String(), "[FAIL] ttl") {
		t.Fatalf("text report:\n%s", out.String())
	}
	if code := run(ctx, []string{"doctor"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--redis") {
		t.Fatalf("no Redis: exit %d, stderr %q", code, errOut.String())
	}
}
