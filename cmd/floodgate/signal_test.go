package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeSecondSignalExits: a second SIGTERM during the shutdown's
// --shutdown-delay ends serve at once instead of waiting out the delay
// (a minute here); the first one alone leaves it waiting.
func TestServeSecondSignalExits(t *testing.T) {
	s := startService(t, "--shutdown-delay", "1m")
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	const draining = "shutting down: readiness off, draining"
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, ok := s.Logged(draining); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log 30 s after SIGTERM:\n%s", draining, s.Logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-s.Done():
		t.Fatalf("serve exited during its minute of --shutdown-delay after one SIGTERM: %v\n%s", s.Err(), s.Logs())
	case <-time.After(200 * time.Millisecond):
	}
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after a second SIGTERM (its --shutdown-delay is a minute)\n%s", s.Logs())
	}
	var ee *exec.ExitError
	if err := s.Err(); !errors.As(err, &ee) {
		t.Fatalf("serve ended with %v after the second SIGTERM, want its death by the signal", err)
	}
	if strings.Contains(s.Logs(), "floodgate stopped") {
		t.Errorf("serve logged a clean stop after the second SIGTERM:\n%s", s.Logs())
	}
	if _, ok := s.Logged("second signal: exiting at once, abandoning the shutdown (delay and drain)"); !ok {
		t.Errorf("serve did not log why it ended:\n%s", s.Logs())
	}
}

// TestServeLeavesLiveCountAtOnce: a stopping instance leaves the live
// count (<prefix>:instances) when the shutdown starts, while it still
// serves out --shutdown-delay, as docs/operations.md says ("a stopping
// instance leaves at once"). Before, it left only after the delay and the
// drains (a minute here), the others counting it all that time, and with
// Redis stalled the leave's second came on top of the drains.
func TestServeLeavesLiveCountAtOnce(t *testing.T) {
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("leave%d", time.Now().UnixNano())
	s := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", prefix, "--shutdown-delay", "1m")
	c := pauseClient(t, rs.Addr)
	ctx := context.Background()
	members := func() int64 {
		n, err := c.ZCard(ctx, prefix+":instances").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitUntil(t, "the instance in the live count", func() bool { return members() == 1 })
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the shutdown", func() bool {
		_, ok := s.Logged("shutting down: readiness off, draining")
		return ok
	})
	// The set's own expiry would empty it in some seconds whatever the
	// instance does (it no longer beats): take it away, so that only
	// the instance leaving can.
	if err := c.Persist(ctx, prefix+":instances").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the instance out of the live count after SIGTERM", func() bool { return members() == 0 })
	if code, body := readyz(t, s.url); code != 503 || !strings.Contains(body, "draining") {
		t.Fatalf("readyz once the instance left, during its minute of --shutdown-delay: %d %s; want 503 draining", code, body)
	}
	select {
	case <-s.Done():
		t.Fatalf("serve exited during its --shutdown-delay: %v\n%s", s.Err(), s.Logs())
	default:
	}
	if err := s.Signal(syscall.SIGTERM); err != nil { // the second ends it at once
		t.Fatal(err)
	}
	<-s.Done()
}

// TestServeHangupReloads: SIGHUP, the customary "reload" of supervisors
// and operators, reads the configuration file at once (here, with a poll
// an hour away) and never stops serve, with or without a file to read;
// before, the signal's default action ended the process without a word.
func TestServeHangupReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	doc := func(limit int) string {
		return fmt.Sprintf("version: \"1\"\npolicies:\n  - name: api\n    layers:\n      - {name: u, algorithm: fixed_window, limit: %d, window: 1m, dimension: user}\n", limit)
	}
	writeFileAtomic(t, path, doc(5))
	svc := startService(t, "--config", path, "--reload-interval", "1h")
	defer svc.stop(t)
	limit := func() int64 {
		t.Helper()
		code, r := post(t, svc.url+"/v1/peek", map[string]any{"policy": "api", "identity": map[string]string{"user": "u"}})
		if code != 200 {
			t.Fatalf("peek: status %d", code)
		}
		return r.Limit
	}
	if got := limit(); got != 5 {
		t.Fatalf("limit %d, want 5", got)
	}
	writeFileAtomic(t, path, doc(7))
	if err := svc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SIGHUP to apply the new file", func() bool { return limit() == 7 })
	// The new configuration is in force (the peek above) a moment before
	// its line is logged and read from the process's stderr: wait for both
	// lines before comparing their order.
	waitFor(t, "the SIGHUP and the read's result to be logged", func() bool {
		logs := svc.Logs()
		return strings.Contains(logs, "SIGHUP: reading the configuration now") && strings.Contains(logs, "configuration applied")
	})
	// The signal's line comes before what the read found (a walk saw
	// "configuration unchanged" logged before it).
	if logs := svc.Logs(); strings.Index(logs, "SIGHUP: reading the configuration now") > strings.LastIndex(logs, "configuration applied") {
		t.Fatalf("the read's result was logged before the SIGHUP line:\n%s", logs)
	}
	if err := svc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unchanged file to be logged", func() bool { return strings.Contains(svc.Logs(), "configuration unchanged") })
	if logs := svc.Logs(); strings.LastIndex(logs, "SIGHUP: reading the configuration now") > strings.Index(logs, "configuration unchanged") {
		t.Fatalf("the second read's result was logged before its SIGHUP line:\n%s", logs)
	}
	select {
	case <-svc.Done():
		t.Fatalf("serve exited after SIGHUP: %v\n%s", svc.Err(), svc.Logs())
	default:
	}

	bare := startService(t)
	defer bare.stop(t)
	if err := bare.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SIGHUP to be logged", func() bool { return strings.Contains(bare.Logs(), "SIGHUP: nothing to reload") })
	if code, _ := post(t, bare.url+"/v1/check", map[string]any{"policy": "api", "identity": map[string]string{"user": "u"}}); code != 200 {
		t.Fatalf("after SIGHUP without a configuration file: status %d", code)
	}
}

// TestEnvoyCompatHangupReloads: envoy-compat loads its runtime directory
// on SIGHUP (here with a poll an hour away) and keeps running.
func TestEnvoyCompatHangupReloads(t *testing.T) {
	rdb := redistest.Start(t)
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(cfgDir, "a.yaml"), "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	c := startCompatArgs(t, []string{"--reload-interval", "1h"}, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit")
	writeFileAtomic(t, filepath.Join(cfgDir, "b.yaml"), "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	if err := c.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SIGHUP to load domain b", func() bool {
		code, body := httpGet(t, "http://"+c.debug+"/rlconfig")
		return code == 200 && strings.Contains(body, "b.user")
	})
	select {
	case <-c.Done():
		t.Fatalf("envoy-compat exited after SIGHUP: %v\n%s", c.Err(), c.Logs())
	default:
	}
}

// TestServeSIGHUPWhileConfigUnreadable: a SIGHUP while the --config file
// is missing logs its outcome (the file unreadable, with the error), and
// once the file holds the active configuration again GET
// /admin/v1/config's rejected is cleared, as without the SIGHUP. A config
// walk found rejected kept until the next SIGHUP or a new version, and
// the SIGHUP logging nothing but its own line.
func TestServeSIGHUPWhileConfigUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	good := "version: \"h1\"\npolicies:\n  - name: api\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n"
	writeFileAtomic(t, path, good)
	svc := startService(t, "--config", path, "--reload-interval", "50ms", "--admin-token", e2eAdminToken)
	defer svc.stop(t)
	rejected := func() *config.Rejection {
		t.Helper()
		return adminConfigInfo(t, svc.url).Rejected
	}
	const unreadable = "configuration source unreadable; keeping the last good configuration"
	writeFileAtomic(t, path, "")
	waitFor(t, "the empty file rejected", func() bool { return rejected() != nil })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the missing file logged", func() bool { return strings.Count(svc.Logs(), unreadable) == 1 })
	if err := svc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(svc.Logs(), unreadable) < 2 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if logs := svc.Logs(); strings.Count(logs, unreadable) != 2 {
		t.Errorf("the SIGHUP's outcome, the file unreadable, was not logged:\n%s", logs)
	} else if strings.LastIndex(logs, "SIGHUP: reading the configuration now") > strings.LastIndex(logs, unreadable) {
		t.Errorf("the SIGHUP's outcome was logged before its SIGHUP line:\n%s", logs)
	}
	writeFileAtomic(t, path, good)
	waitFor(t, "rejected cleared once the file holds the active configuration again", func() bool { return rejected() == nil })
	if logs := svc.Logs(); !strings.Contains(logs, "configuration source holds the active configuration again") {
		t.Fatalf("the end of the rejection was not logged:\n%s", logs)
	}
}

// TestServeAdminOutlivesSignal: the admin listener serves through
// --shutdown-delay and the drain, as the probes' listener does, so that
// the metrics of a draining instance (with --metrics-admin-only, served
// there only) are scraped until it stops; it used to close at SIGTERM.
func TestServeAdminOutlivesSignal(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(e2eAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startService(t, "--admin-token-file", tokenFile, "--admin-addr", "127.0.0.1:0", "--metrics-admin-only", "--shutdown-delay", "1m")
	adminURL := "http://" + s.addr(t, "floodgate admin listening")
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the shutdown", func() bool {
		_, ok := s.Logged("shutting down: readiness off, draining")
		return ok
	})
	if code := adminGet(t, adminURL, "/metrics", ""); code != http.StatusOK {
		t.Fatalf("/metrics on --admin-addr during --shutdown-delay: %d, want 200", code)
	}
	if code := adminGet(t, adminURL, "/admin/v1/config", e2eAdminToken); code != http.StatusOK {
		t.Fatalf("admin API on --admin-addr during --shutdown-delay: %d, want 200", code)
	}
	if err := s.Signal(syscall.SIGTERM); err != nil { // the second ends it at once
		t.Fatal(err)
	}
	<-s.Done()
}

// TestServeLogsStoppedLast: "floodgate stopped" is logged once every
// listener has drained, here the admin listener holding a 3-second delta
// profile; it was logged as the main listener stopped, while the admin,
// probes' and gRPC listeners still served (10 s in a walk).
func TestServeLogsStoppedLast(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(e2eAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startService(t, "--admin-token-file", tokenFile, "--admin-addr", "127.0.0.1:0", "--pprof")
	adminURL := "http://" + s.addr(t, "floodgate admin listening")
	held := make(chan int, 1)
	go func() {
		resp, err := http.Get(adminURL + "/debug/pprof/heap?seconds=3")
		if err != nil {
			held <- 0
			return
		}
		_ = resp.Body.Close()
		held <- resp.StatusCode
	}()
	time.Sleep(300 * time.Millisecond) // the profile under way
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "floodgate stopped in the log", func() bool {
		_, ok := s.Logged("floodgate stopped")
		return ok
	})
	select {
	case code := <-held:
		if code != http.StatusOK {
			t.Fatalf("the profile held across the shutdown answered %d, want 200", code)
		}
	default:
		t.Fatalf("floodgate stopped logged while the admin listener still served a profile:\n%s", s.Logs())
	}
	<-s.Done()
}
