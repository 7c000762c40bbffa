package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
)

// causeRecorder implements fallback.Observer and fallback.CauseObserver.
type causeRecorder struct {
	recorder
	mu     sync.Mutex
	causes []string // "state: cause"
	probes []string // each probe's error, "ok" for none
}

func (r *causeRecorder) ObserveBreakerCause(partition string, s fallback.BreakerState, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.causes = append(r.causes, fmt.Sprintf("%s: %v", s, cause))
}

func (r *causeRecorder) ObserveProbe(partition string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := "ok"
	if err != nil {
		msg = err.Error()
	}
	r.probes = append(r.probes, partition+": "+msg)
}

func (r *causeRecorder) seen() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.causes...), append([]string(nil), r.probes...)
}

// TestCauseObserver: an Observer that is a CauseObserver is told the
// error of the failed decision that opened the breaker (serve's log said
// only that it opened, an outside walk found), in place of
// ObserveBreaker, and the result of every background probe while it is
// open, the probe's error first.
func TestCauseObserver(t *testing.T) {
	primary := newScripted(t)
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var healthy atomic.Bool
	obs := &causeRecorder{}
	store, err := fallback.New(primary, local, fallback.Options{
		Observer: obs,
		Breaker:  fallback.BreakerOptions{FailureThreshold: 2, ProbeInterval: 2 * time.Millisecond, ProbeSuccesses: 2},
		Probe: func(context.Context, string) error {
			if !healthy.Load() {
				return errors.New("LOADING Redis is loading the dataset in memory")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	lim, err := floodgate.New(store, floodgate.Options{Prefix: "cause"})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 1000, time.Hour))
	primary.set(fmt.Errorf("%w: dial tcp: connect: connection refused", floodgate.ErrStoreUnavailable), false, false)
	for range 2 {
		if _, err := lim.Allow(context.Background(), p, "u1"); err != nil {
			t.Fatal(err)
		}
	}
	causes, _ := obs.seen()
	want := []string{"closed: <nil>", "open: " + floodgate.ErrStoreUnavailable.Error() + ": dial tcp: connect: connection refused"}
	if fmt.Sprint(causes) != fmt.Sprint(want) {
		t.Fatalf("breaker reports %q, want %q", causes, want)
	}
	if obs.recorder.states != nil {
		t.Fatalf("ObserveBreaker called too: %v", obs.recorder.states)
	}
	for {
		if _, probes := obs.seen(); len(probes) > 0 {
			if got, want := probes[0], fallback.DefaultPartition+": LOADING Redis is loading the dataset in memory"; got != want {
				t.Fatalf("first probe reported as %q, want %q", got, want)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	healthy.Store(true)
	for store.BreakerState() != fallback.BreakerClosed {
		time.Sleep(time.Millisecond)
	}
	causes, probes := obs.seen()
	if got := causes[len(causes)-1]; got != "closed: <nil>" {
		t.Fatalf("last report %q, want closed: <nil>", got)
	}
	if got := probes[len(probes)-1]; got != fallback.DefaultPartition+": ok" {
		t.Fatalf("last probe reported as %q, want ok", got)
	}
}
