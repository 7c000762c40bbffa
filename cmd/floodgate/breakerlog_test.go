package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

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
