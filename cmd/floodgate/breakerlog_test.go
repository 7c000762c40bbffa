package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/metrics"
)

// TestBreakerLogForget: a dropped breaker (a Cluster primary gone from the
// slot map) is logged as dropped, and one made again for the same address
// starts unlogged like any new breaker: it was logged "closed: deciding
// with Redis" with no open state before it (an outside walk read that for
// every demoted primary swept and promoted back).
func TestBreakerLogForget(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	b := newBreakerLog(m, slog.New(slog.NewTextHandler(&buf, nil)))
	var _ fallback.BreakerForgetter = b
	b.ObserveBreaker("10.0.0.1:6379", fallback.BreakerClosed) // made: not logged
	b.ForgetBreaker("10.0.0.1:6379")
	b.ObserveBreaker("10.0.0.1:6379", fallback.BreakerClosed) // made again
	out := buf.String()
	if strings.Contains(out, "closed: deciding with Redis") || !strings.Contains(out, "circuit breaker dropped: no longer a Redis primary") {
		t.Fatalf("log:\n%s", out)
	}
	b.ObserveBreaker("10.0.0.1:6379", fallback.BreakerOpen)
	b.ObserveBreaker("10.0.0.1:6379", fallback.BreakerClosed)
	if out := buf.String(); !strings.Contains(out, "circuit breaker open") || !strings.Contains(out, "closed: deciding with Redis") {
		t.Fatalf("log after open and closed:\n%s", out)
	}
}

// TestProbeLog: an open breaker's probe failing for another reason than
// the one last logged is logged, at most once per interval, never for the
// same reason again; a change held back by the interval is logged at a
// later probe once the interval has passed; successes and closed
// breakers are not logged.
func TestProbeLog(t *testing.T) {
	var buf bytes.Buffer
	p := newProbeLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	const msg = "Redis fails its health probe for another reason"
	lines := func() int { t.Helper(); return strings.Count(buf.String(), msg) }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	loading := replyError("LOADING Redis is loading the dataset in memory")
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	p.probed("primary", loading) // not open: not logged
	p.changed("primary", fallback.BreakerOpen, fmt.Errorf("floodgate: store unavailable: %w", refused))
	for _, step := range []struct {
		err  error
		want int
	}{
		{refused, 0}, // the opening's reason
		{loading, 1}, // another reason
		{loading, 1}, // the same
		{nil, 1},     // a success
		{timeout, 1}, // another, within the interval: held back
		{loading, 1}, // back to the one logged
	} {
		p.probed("primary", step.err)
		if got := lines(); got != step.want {
			t.Fatalf("after probe %v: %d lines, want %d:\n%s", step.err, got, step.want, buf.String())
		}
	}
	if !strings.Contains(buf.String(), "before=\"connection refused\"") || !strings.Contains(buf.String(), "LOADING") {
		t.Fatalf("log:\n%s", buf.String())
	}
	p.mu.Lock()
	p.last = time.Time{} // the interval has passed
	p.mu.Unlock()
	p.probed("primary", timeout)
	if got := lines(); got != 2 || !strings.Contains(buf.String(), "before=LOADING") {
		t.Fatalf("held-back timeout after the interval: %d lines, want 2:\n%s", got, buf.String())
	}
	p.changed("primary", fallback.BreakerClosed, nil)
	p.mu.Lock()
	p.last = time.Time{}
	p.mu.Unlock()
	p.probed("primary", loading)
	if got := lines(); got != 2 {
		t.Fatalf("probe of a closed breaker logged:\n%s", buf.String())
	}
}

// replyError is a Redis error reply, as go-redis returns one (redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }

func (replyError) RedisError() {}
