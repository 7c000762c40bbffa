package main

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestCheckDegraded: with serve's Redis killed, check's text output says
// the decision was the fallback's (mode and reason), not the shared
// count, and keeps the decision's exit status; while Redis decides it
// says nothing of the kind. It used to print a plain ALLOWED.
func TestCheckDegraded(t *testing.T) {
	rs := redistest.Start(t)
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("chkdeg%d", time.Now().UnixNano()))
	defer svc.stop(t)
	check := func() (int, string, string) {
		return cli("check", "--addr", svc.url, "--policy", "api", "--id", "user=deg")
	}
	// The first decisions (script loading on a loaded machine) may miss
	// the fallback's budget: wait for one that Redis took.
	waitUntil(t, "a decision Redis took", func() bool {
		code, out, _ := check()
		return code == 0 && !strings.Contains(out, "DEGRADED")
	})
	rs.Kill()
	code, out, errOut := check()
	if code != 0 || !strings.Contains(out, "ALLOWED") || !strings.Contains(out, "\nDEGRADED: decided by the fallback (mode local, reason ") ||
		!strings.Contains(out, "not the shared count") {
		t.Fatalf("check with Redis killed: exit %d\n%s%s\nwant exit 0, ALLOWED and a DEGRADED line naming mode local", code, out, errOut)
	}
}

// TestCheckPrintsDegradedClosed: a denial by the closed failure mode says
// so, with what it means.
func TestCheckPrintsDegradedClosed(t *testing.T) {
	var b strings.Builder
	printDecision(&b, checkResponse(false, "closed", "timeout"), time.Unix(0, 0))
	want := "DEGRADED: decided by the fallback (mode closed, reason timeout): not the shared count; denied while Redis cannot decide\n"
	if out := b.String(); !strings.HasPrefix(out, "DENIED") || !strings.Contains(out, want) {
		t.Fatalf("printDecision of a closed-mode denial:\n%s\nwant DENIED and %q", out, want)
	}
	b.Reset()
	printDecision(&b, checkResponse(true, "", ""), time.Unix(0, 0))
	if strings.Contains(b.String(), "DEGRADED") {
		t.Fatalf("printDecision of a decision Redis took:\n%s\nwant no DEGRADED line", b.String())
	}
}

// checkResponse is an answer of policy api, degraded when mode is set.
func checkResponse(allowed bool, mode, reason string) server.CheckResponse {
	return server.CheckResponse{Allowed: allowed, Policy: "api", Limit: 100, Degraded: mode != "", FailureMode: mode, DegradedReason: reason}
}

// TestCheckJSONProblem: with --json, a request the service refuses
// prints its problem JSON on stdout, exit status 1; it used to print
// nothing there.
func TestCheckJSONProblem(t *testing.T) {
	svc := startService(t)
	defer svc.stop(t)
	code, out, errOut := cli("check", "--addr", svc.url, "--policy", "nope", "--id", "user=1", "--json")
	var p server.Problem
	if err := json.Unmarshal([]byte(out), &p); code != 1 || err != nil || p.Status != 400 || p.Type != server.ProblemTypePrefix+"unknown-policy" ||
		!strings.Contains(p.Detail, `"nope"`) || !strings.Contains(errOut, "400") {
		t.Fatalf("check --json of an unknown policy: exit %d, stdout %q (%v), stderr %q; want 1, the 400 problem JSON, and the error", code, out, err, errOut)
	}
}

// TestCheckMissingIdentityNamesTheFlag: without --id, the service's hint is
// its JSON field; check adds the flag a command-line user needs.
func TestCheckMissingIdentityNamesTheFlag(t *testing.T) {
	svc := startService(t)
	defer svc.stop(t)
	code, _, errOut := cli("check", "--addr", svc.url, "--policy", "api")
	if code != 1 || !strings.Contains(errOut, `needs identity value "user"`) || !strings.Contains(errOut, "--id dimension=value (e.g. --id user=42)") {
		t.Fatalf("check without --id: exit %d, stderr %q; want 1 and a hint naming --id", code, errOut)
	}
}

// TestCheckCostHintNamesPeekFlag: the service refuses a cost of 0 with a
// hint naming its peek endpoint; check gives the hint as its flag, --peek
// (an outside walk: "use /v1/peek" from a command line). --json still
// gives the service's own problem JSON.
func TestCheckCostHintNamesPeekFlag(t *testing.T) {
	svc := startService(t)
	defer svc.stop(t)
	code, out, errOut := cli("check", "--addr", svc.url, "--policy", "api", "--id", "user=c0", "--cost", "0")
	if code != 1 || out != "" || !strings.Contains(errOut, "cost 0 out of range 1..1099511627776 (use --peek to check without consuming)") || strings.Contains(errOut, "/v1/peek") {
		t.Fatalf("check --cost 0: exit %d, stdout %q, stderr %q; want 1 and a hint naming --peek", code, out, errOut)
	}
	code, out, _ = cli("check", "--addr", svc.url, "--policy", "api", "--id", "user=c0", "--cost", "0", "--json")
	var p struct{ Detail string }
	if err := json.Unmarshal([]byte(out), &p); code != 1 || err != nil || !strings.Contains(p.Detail, "/v1/peek") {
		t.Fatalf("check --cost 0 --json: exit %d, stdout %q; want 1 and the service's problem JSON", code, out)
	}
}

// TestCheckRefusedNamesWhatToDo: with nothing listening at --addr (the
// service not started, or on another port), check says so and what to
// do; it printed go's dial error alone (newuser9).
func TestCheckRefusedNamesWhatToDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	code, _, errOut := cli("check", "--addr", url, "--policy", "api", "--id", "user=1")
	if code != 1 || !strings.Contains(errOut, "connection refused") ||
		!strings.Contains(errOut, "nothing listens at "+url+": start the service (floodgate serve) or give its URL with --addr") {
		t.Fatalf("check with nothing listening: exit %d, stderr %q; want 1 and a hint", code, errOut)
	}
}
