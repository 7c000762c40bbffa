package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// draining is serve's log message at the start of its shutdown.
const draining = "shutting down: readiness off, draining"

// awaitLine waits up to 30 s for p to log a record with message msg and
// returns when the test saw it.
func awaitLine(t *testing.T, p *proctest.Proc, msg string) time.Time {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, ok := p.Logged(msg); ok {
			return time.Now()
		}
		select {
		case <-p.Done():
			t.Fatalf("exited before logging %q: %v\n%s", msg, p.Err(), p.Logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log 30 s after SIGTERM:\n%s", msg, p.Logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pastRepeatWindow waits until repeatWindow has passed since seen, when
// the test saw the line logged after the first signal had arrived: a
// signal sent then is a deliberate second one, not a repeated delivery.
func pastRepeatWindow(seen time.Time) { time.Sleep(time.Until(seen.Add(repeatWindow))) }

// TestServeSecondSignalExits: a second SIGTERM during the shutdown's
// --shutdown-delay, sent past repeatWindow, ends serve at once instead of
// waiting out the delay (a minute here); the first one alone leaves it
// waiting.
func TestServeSecondSignalExits(t *testing.T) {
	s := startService(t, "--shutdown-delay", "1m")
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	seen := awaitLine(t, s.Proc, draining)
	select {
	case <-s.Done():
		t.Fatalf("serve exited during its minute of --shutdown-delay after one SIGTERM: %v\n%s", s.Err(), s.Logs())
	case <-time.After(time.Until(seen.Add(repeatWindow))):
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
	if strings.Contains(s.Logs(), "signal repeated") {
		t.Errorf("serve took the second SIGTERM, past repeatWindow, for a repeated delivery:\n%s", s.Logs())
	}
}

// TestSecondSignalExitsWhenIgnoredAtStart: serve started with SIGINT
// ignored (as a shell script's background job is: the shell's trap ""
// here) still stops on a first signal, and a second SIGINT past
// repeatWindow ends it at once. It logged "second signal: exiting at
// once" and then drained for its whole --shutdown-delay and exited 0:
// reset to its state at start, SIGINT was ignored again, and raising it
// ended nothing (review15, 3 of 3).
func TestSecondSignalExitsWhenIgnoredAtStart(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap "" INT; exec "$0" "$@"`, binary(t), "serve", "--addr", "127.0.0.1:0", "--log-format", "json", "--shutdown-delay", "1m")
	s := proctest.Start(t, cmd, "floodgate listening")
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	pastRepeatWindow(awaitLine(t, s, draining))
	if err := s.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("serve, started with SIGINT ignored, still running 30 s after a second signal (SIGINT; its --shutdown-delay is a minute)\n%s", s.Logs())
	}
	var ee *exec.ExitError
	if err := s.Err(); !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Fatalf("serve ended with %v after the second signal, want exit status %d", err, 128+int(syscall.SIGINT))
	}
	if _, ok := s.Logged("second signal: exiting at once, abandoning the shutdown (delay and drain)"); !ok {
		t.Errorf("serve did not log why it ended:\n%s", s.Logs())
	}
}

// TestRepeatedSignalDrains: the same SIGTERM delivered twice at once, as
// timeout(1) delivers it (to the command, then to its own process group),
// is one request to stop: serve and envoy-compat drain, a request in
// flight is answered, and they exit cleanly. Both took the second
// delivery for a second signal and abandoned the drain at once whenever
// it reached them after the first had started the shutdown ("timeout -s
// TERM 1 floodgate serve" logged "second signal" in 3 runs of 10).
// "back to back" sends both before the process can react, as timeout(1)
// does; "after the first's line" sends the second as soon as the
// shutdown is logged, within repeatWindow, where the old code always
// exited. A machine so slow that the second arrived past repeatWindow
// (then rightly a second signal) skips the case.
func TestRepeatedSignalDrains(t *testing.T) {
	cases := []struct {
		name       string
		awaitFirst bool
	}{
		{"back to back", false},
		{"after the first's line", true},
	}
	for _, c := range cases {
		t.Run("serve/"+c.name, func(t *testing.T) {
			s := startService(t, "--shutdown-delay", "1s")
			held := holdRequest(t, s.url[len("http://"):], "/v1/check", checkBody)
			repeatStop(t, s.Proc, held, draining, c.awaitFirst)
			if _, ok := s.Logged("floodgate stopped"); !ok {
				t.Errorf("no floodgate stopped in the log:\n%s", s.Logs())
			}
		})
	}
	for _, c := range cases {
		t.Run("envoy-compat/"+c.name, func(t *testing.T) {
			rdb := redistest.Start(t)
			_, rt := compatRuntime(t, compatConfig)
			p := startCompat(t, append(rt, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "CACHE_KEY_PREFIX=repeat_")...)
			waitFor(t, "healthcheck OK", func() bool {
				code, body := httpGet(t, "http://"+p.http+"/healthcheck")
				return code == 200 && body == "OK"
			})
			held := holdAcceptedRequest(t, p.http, "/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"plan","value":"gold"}]}]}`)
			repeatStop(t, p.Proc, held, "floodgate envoy-compat stopping", c.awaitFirst)
		})
	}
}

// repeatStop sends p SIGTERM twice, the second at once or (awaitFirst)
// as soon as p has logged first, the line of its shutdown's start, then
// finishes held and checks that it was answered, that p exited cleanly,
// and that the repeat was logged at most once, as such.
func repeatStop(t *testing.T, p *proctest.Proc, held *heldRequest, first string, awaitFirst bool) {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if awaitFirst {
		awaitLine(t, p, first)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, p, first)
	var resp *http.Response
	_, err := held.conn.Write([]byte{held.last})
	if err == nil {
		if err = held.conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err == nil {
			resp, err = http.ReadResponse(bufio.NewReader(held.conn), nil)
		}
	}
	if err != nil {
		<-p.Done()
		if rec, ok := p.Logged("second signal: exiting at once, " + abandonedBy(first)); ok {
			if d, perr := time.ParseDuration(rec["since_first"]); perr == nil && d >= repeatWindow {
				t.Skipf("the second SIGTERM arrived %v after the first, past repeatWindow (%v): too slow a machine for this case", d, repeatWindow)
			}
			t.Fatalf("the repeated SIGTERM was taken for a second signal, the request in flight cut (%v):\n%s", err, p.Logs())
		}
		t.Fatalf("the request in flight across the shutdown: %v\n%s", err, p.Logs())
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the request in flight across the shutdown: %d, want 200", resp.StatusCode)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("exited with %v after a repeated SIGTERM, want a clean stop:\n%s", err, p.Logs())
	}
	logs := p.Logs()
	if strings.Contains(logs, "second signal") {
		t.Errorf("a repeated SIGTERM logged as a second signal:\n%s", logs)
	}
	if n := strings.Count(logs, "signal repeated: the same stop request, the shutdown goes on"); n > 1 || awaitFirst && n != 1 {
		t.Errorf("the repeated SIGTERM logged %d times, want once (at most once when sent back to back):\n%s", n, logs)
	}
}

// abandonedBy is what a second signal cuts short in the process whose
// shutdown starts with the line first.
func abandonedBy(first string) string {
	if first == draining {
		return "abandoning the shutdown (delay and drain)"
	}
	return "abandoning the drain"
}

// TestRepeatedDelivery: only the same signal less than repeatWindow after
// the first is a repeated delivery of it.
func TestRepeatedDelivery(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		sig   syscall.Signal
		after time.Duration
		want  bool
	}{
		{"same signal at once (timeout(1))", syscall.SIGTERM, 0, true},
		{"same signal just within the window", syscall.SIGTERM, repeatWindow - time.Nanosecond, true},
		{"same signal at the window's end", syscall.SIGTERM, repeatWindow, false},
		{"same signal a second later (Ctrl-C again)", syscall.SIGTERM, time.Second, false},
		{"the other signal at once", syscall.SIGINT, 0, false},
	} {
		if got := repeatedDelivery(syscall.SIGTERM, t0, c.sig, t0.Add(c.after)); got != c.want {
			t.Errorf("%s: repeatedDelivery %v, want %v", c.name, got, c.want)
		}
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
	seen := awaitLine(t, s.Proc, draining)
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
	pastRepeatWindow(seen)
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
	seen := awaitLine(t, s.Proc, draining)
	if code := adminGet(t, adminURL, "/metrics", ""); code != http.StatusOK {
		t.Fatalf("/metrics on --admin-addr during --shutdown-delay: %d, want 200", code)
	}
	if code := adminGet(t, adminURL, "/admin/v1/config", e2eAdminToken); code != http.StatusOK {
		t.Fatalf("admin API on --admin-addr during --shutdown-delay: %d, want 200", code)
	}
	pastRepeatWindow(seen)
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
