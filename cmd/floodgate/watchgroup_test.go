package main

import (
	"slices"
	"testing"
	"time"
)

// TestWatchGroupAbandonsBlocked: Wait returns within its bound when a
// goroutine never returns (a read of a hung network mount), naming it,
// and at once when all have returned. serve waited for its watchers
// without a bound, so that one blocked read kept it from ever exiting.
func TestWatchGroupAbandonsBlocked(t *testing.T) {
	var g watchGroup
	block := make(chan struct{})
	defer close(block)
	g.Go("--config ff.yaml", func() { <-block })
	g.Go("SIGHUP", func() {})
	start := time.Now()
	if got, want := g.Wait(100*time.Millisecond), []string{"--config ff.yaml"}; !slices.Equal(got, want) {
		t.Fatalf("Wait: %q still running, want %q", got, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Wait took %v, want about 100ms", d)
	}

	var done watchGroup
	done.Go("SIGHUP", func() {})
	if got := done.Wait(time.Minute); got != nil {
		t.Fatalf("Wait with every goroutine returned: %q", got)
	}
}
