package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The test binary doubles as the process under test: with PROCTEST_CHILD
// set, TestMain runs child instead of the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("PROCTEST_CHILD"); mode != "" {
		child(mode)
		return
	}
	os.Exit(m.Run())
}

// child writes log lines to stderr as its mode says, then (unless it
// exits early) waits for SIGTERM and exits 0.
func child(mode string) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	fmt.Fprintln(os.Stderr, "plain text first")
	switch mode {
	case "serve":
		fmt.Fprintln(os.Stderr, `{"msg":"grpc listening","addr":"127.0.0.1:2","n":1}`)
		fmt.Fprintln(os.Stderr, strings.Repeat("x", 200<<10)) // longer than bufio's default
		fmt.Fprintln(os.Stderr, `{"msg":"http listening","addr":"127.0.0.1:1"}`)
		fmt.Fprintln(os.Stderr, `{"msg":"http listening","addr":"127.0.0.1:9"}`)
	case "fail":
		fmt.Fprintln(os.Stderr, `{"msg":"config refused"}`)
		os.Exit(3)
	case "quick":
		fmt.Fprintln(os.Stderr, `{"msg":"http listening","addr":"127.0.0.1:1"}`)
		os.Exit(0)
	}
	<-term
	fmt.Fprintln(os.Stderr, `{"msg":"shutting down"}`)
	os.Exit(0)
}

func childCmd(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	// No race detector pause at exit (a second per process).
	cmd.Env = append(os.Environ(), "PROCTEST_CHILD="+mode, "GORACE=atexit_sleep_ms=0")
	return cmd
}

// fakeT stands in for a test to see what Start does to it: Fatal ends
// the calling goroutine (as testing's does) and cleanups run on demand.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	fatal    string
	logs     []string
	cleanups []func()
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal != ""
}

func (f *fakeT) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

// start runs Start for f in its own goroutine, as Fatal ends it, and then
// runs f's cleanups. It returns what Start returned (nil after Fatal).
func (f *fakeT) start(cmd *exec.Cmd, msgs ...string) *Proc {
	var p *Proc
	done := make(chan struct{})
	go func() {
		defer close(done)
		p = Start(f, cmd, msgs...)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return p
}

// TestStartWaitsForRecords: Start returns once every awaited record has
// appeared, in whatever order, past a line longer than bufio's default
// limit; Record gives the first of each; Stop ends the process cleanly.
func TestStartWaitsForRecords(t *testing.T) {
	p := Start(t, childCmd(t, "serve"), "http listening", "grpc listening")
	if got, want := p.Record("http listening")["addr"], "127.0.0.1:1"; got != want {
		t.Errorf("http addr = %q, want %q", got, want)
	}
	if got, want := p.Record("grpc listening")["addr"], "127.0.0.1:2"; got != want {
		t.Errorf("grpc addr = %q, want %q", got, want)
	}
	if _, ok := p.Record("grpc listening")["n"]; ok {
		t.Errorf("a number field is in the record: %v", p.Record("grpc listening"))
	}
	if p.Record("shutting down") != nil {
		t.Errorf("Record of a message Start did not wait for: %v", p.Record("shutting down"))
	}
	if rec, ok := p.Logged("http listening"); !ok || rec["addr"] != "127.0.0.1:1" {
		t.Errorf("Logged(http listening) = %v, %v, want the first record", rec, ok)
	}
	if rec, ok := p.Logged("shutting down"); ok {
		t.Errorf("Logged(shutting down) = %v before SIGTERM", rec)
	}
	select {
	case <-p.Done():
		t.Fatal("Done closed while the process runs")
	default:
	}
	if err := p.Stop(t); err != nil {
		t.Fatalf("Stop: %v, want a clean exit", err)
	}
	<-p.Done()
	if _, ok := p.Logged("shutting down"); !ok {
		t.Errorf("Logged(shutting down) found nothing after SIGTERM")
	}
	logs := p.Logs()
	for _, want := range []string{"plain text first\n", `{"msg":"shutting down"}` + "\n"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%.300s", want, logs)
		}
	}
}

// TestStartFailsOnEarlyExit: a process that exits before logging what
// Start waits for fails the test with its exit status and its log.
func TestStartFailsOnEarlyExit(t *testing.T) {
	f := &fakeT{TB: t}
	if p := f.start(childCmd(t, "fail"), "http listening"); p != nil {
		t.Fatal("Start returned after the process exited")
	}
	for _, want := range []string{"exited before logging", "exit status 3", "config refused"} {
		if !strings.Contains(f.fatal, want) {
			t.Errorf("failure %q lacks %q", f.fatal, want)
		}
	}
	if len(f.logs) != 1 || !strings.Contains(f.logs[0], "plain text first") {
		t.Errorf("cleanup of a failed test logged %q, want the process's log", f.logs)
	}
}

// TestStartQuickExit: a process that logs what Start waits for and exits
// at once is still seen as having started.
func TestStartQuickExit(t *testing.T) {
	p := Start(t, childCmd(t, "quick"), "http listening")
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if got := p.Record("http listening")["addr"]; got != "127.0.0.1:1" {
		t.Fatalf("addr = %q", got)
	}
}

// TestCleanupStops: the cleanup of a passing test sends SIGTERM to a
// process still running, waits for it and logs nothing.
func TestCleanupStops(t *testing.T) {
	f := &fakeT{TB: t}
	p := f.start(childCmd(t, "serve"), "http listening")
	if p == nil {
		t.Fatalf("Start failed: %s", f.fatal)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("process still running after the cleanup")
	}
	if err := p.Err(); err != nil {
		t.Errorf("exit after the cleanup's SIGTERM: %v", err)
	}
	if !strings.Contains(p.Logs(), "shutting down") {
		t.Errorf("no SIGTERM handled:\n%.300s", p.Logs())
	}
	if len(f.logs) != 0 {
		t.Errorf("cleanup of a passing test logged %q", f.logs)
	}
}
