package servelog_test

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/ratelog"
	"github.com/floodgate-rl/floodgate/internal/servelog"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// tempErr is an accept failure for want of descriptors, temporary as
// net/http's Serve wants to retry it.
type tempErr struct{ error }

func (tempErr) Timeout() bool   { return false }
func (tempErr) Temporary() bool { return true }

// emfileListener fails its first fails Accepts with EMFILE, then closes
// blocked and waits until closed.
type emfileListener struct {
	mu      sync.Mutex
	fails   int
	once    sync.Once
	blocked chan struct{}
	closeMu sync.Once
	done    chan struct{}
}

func newEMFILE(fails int) *emfileListener {
	return &emfileListener{fails: fails, blocked: make(chan struct{}), done: make(chan struct{})}
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, tempErr{&net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}}
	}
	l.mu.Unlock()
	l.once.Do(func() { close(l.blocked) })
	<-l.done
	return nil, net.ErrClosed
}

func (l *emfileListener) Close() error {
	l.closeMu.Do(func() { close(l.done) })
	return nil
}

func (l *emfileListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// records parses every line of out as a JSON record: a line in another
// format fails the test.
func records(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(strings.TrimSpace(out)) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		recs = append(recs, rec)
	}
	return recs
}

// TestErrorLogRateLimitsAcceptRetries: net/http's retries of an accept
// failing with EMFILE (5 of them here) give one warning in the JSON log,
// not one line in Go's plain format per retry.
func TestErrorLogRateLimitsAcceptRetries(t *testing.T) {
	var out syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	ln := newEMFILE(5)
	hs := &http.Server{Handler: http.NotFoundHandler(), ErrorLog: servelog.ErrorLog(log, ratelog.New(log, time.Hour))}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	<-ln.blocked
	_ = hs.Close()
	<-done
	recs := records(t, out.String())
	if len(recs) != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", len(recs), out.String())
	}
	if recs[0]["msg"] != "accepting a connection failed; retrying" || recs[0]["level"] != "WARN" ||
		!strings.Contains(recs[0]["detail"].(string), "too many open files") {
		t.Errorf("the line: %v", recs[0])
	}
}

// TestErrorLogKinds: accept retries are held to one line per interval;
// net/http's other lines are each written, as warnings.
func TestErrorLogKinds(t *testing.T) {
	var out syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	el := servelog.ErrorLog(log, ratelog.New(log, time.Hour))
	for range 3 {
		el.Print("http: Accept error: accept tcp: accept4: too many open files; retrying in 5ms")
	}
	el.Print("http: superfluous response.WriteHeader call")
	el.Print("http: superfluous response.WriteHeader call")
	recs := records(t, out.String())
	if len(recs) != 3 || recs[0]["msg"] != "accepting a connection failed; retrying" ||
		recs[1]["msg"] != "http: superfluous response.WriteHeader call" || recs[2]["level"] != "WARN" {
		t.Fatalf("lines: %v, want one accept line and the two others", recs)
	}
}

// TestListenerLogsAcceptErrors: a listener's failed accepts (grpc-go
// logs none) are logged once per interval, with the listener's address;
// a closed listener's error is not.
func TestListenerLogsAcceptErrors(t *testing.T) {
	var out syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	raw := newEMFILE(3)
	ln := servelog.Listener(raw, ratelog.New(log, time.Hour))
	for range 3 {
		if _, err := ln.Accept(); err == nil {
			t.Fatal("Accept: no error")
		}
	}
	_ = ln.Close()
	if _, err := ln.Accept(); err != net.ErrClosed {
		t.Fatalf("Accept after Close: %v", err)
	}
	recs := records(t, out.String())
	if len(recs) != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", len(recs), out.String())
	}
	if recs[0]["msg"] != "accepting a connection failed" || recs[0]["listener"] != "127.0.0.1:1" ||
		!strings.Contains(recs[0]["error"].(string), "too many open files") {
		t.Errorf("the line: %v", recs[0])
	}
}
