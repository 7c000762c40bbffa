package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/memstore"
)

// short returns one policy per algorithm whose state expires a few
// milliseconds plus algo.TTLSlack after its last write.
func short(t testing.TB) []floodgate.Policy {
	t.Helper()
	var ps []floodgate.Policy
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingLog, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		p := floodgate.Policy{Name: fmt.Sprint("short-", a), Algorithm: a, Limit: 50, Window: 5 * time.Millisecond}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// TestIdleStoreGivesMemoryBack: the expired entries of a flood of
// distinct identities go away with no traffic at all, the live ones stay
// with their counts, and the background sweep stops once the store is
// empty. Before, expired entries were deleted only by writes to their
// shard (up to 32 per 256 writes): an outside walk's 1.48 million flood
// identities left 211 MB of live heap after two idle minutes.
func TestIdleStoreGivesMemoryBack(t *testing.T) {
	l, st := newLimiter(t, memstore.Options{Shards: 4, MaxKeys: 100_000, SweepInterval: 20 * time.Millisecond})
	ctx := context.Background()
	ps := short(t)
	const n = 20_000
	for i := range n {
		if _, err := l.Allow(ctx, ps[i%len(ps)], fmt.Sprint("flood-", i)); err != nil {
			t.Fatal(err)
		}
	}
	long, _ := floodgate.NewFixedWindow("long", 3, time.Hour)
	for range 2 {
		allow(t, l, time.Now(), long, "alice")
	}
	deadline := time.Now().Add(30 * time.Second) // every TTL is 5ms + TTLSlack
	for st.Len() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries 30s after a flood whose states expire after %v, want 1 (alice)", st.Len(), 5*time.Millisecond+algo.TTLSlack)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, p := range st.Peaks() {
		if p > n/4 {
			t.Errorf("shard %d: map still sized for %d entries after the sweep", i, p)
		}
	}
	if r := allow(t, l, time.Now(), long, "alice"); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("alice after the sweep: %+v, want her third request admitted, none left", r)
	}
	st.Reset(l.Key(long, "alice"))
	for st.Sweeping() {
		if time.Now().After(deadline) {
			t.Fatal("the background sweep still runs 30s after the store emptied")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A new identity starts it again.
	for i := range 100 {
		allow(t, l, time.Now(), ps[0], fmt.Sprint("again-", i))
	}
	for st.Len() > 0 {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("%d entries left by a second flood", st.Len())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSweep: an explicit Sweep deletes every expired entry, of every
// algorithm, says how many, keeps the live ones, and the shards' maps are
// rebuilt to their remaining size.
func TestSweep(t *testing.T) {
	l, st := newLimiter(t, memstore.Options{Shards: 2, MaxKeys: 100_000, SweepInterval: -1})
	ctx := context.Background()
	ps := short(t)
	const n = 10_000
	for i := range n {
		if _, err := l.Allow(ctx, ps[i%len(ps)], fmt.Sprint("flood-", i)); err != nil {
			t.Fatal(err)
		}
	}
	long, _ := floodgate.NewSlidingLog("long", 3, time.Hour)
	allow(t, l, time.Now(), long, "bob")
	if got := st.Sweep(); got != 0 {
		t.Fatalf("Sweep deleted %d live entries", got)
	}
	time.Sleep(algo.TTLSlack + 50*time.Millisecond) // every short TTL has passed
	if st.Sweeping() {
		t.Fatal("background sweep running with SweepInterval -1")
	}
	if got := st.Len(); got != n+1 {
		t.Fatalf("len %d before Sweep, want %d (nothing else sweeps an idle store)", got, n+1)
	}
	if got := st.Sweep(); got != n {
		t.Fatalf("Sweep deleted %d, want %d", got, n)
	}
	if got := st.Len(); got != 1 {
		t.Fatalf("len %d after Sweep, want 1 (bob)", got)
	}
	for i, p := range st.Peaks() {
		if p > 1 {
			t.Errorf("shard %d: map sized for %d entries after the sweep, want 1 at most", i, p)
		}
	}
	if r := allow(t, l, time.Now(), long, "bob"); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("bob after the sweep: %+v, want admitted with 1 left", r)
	}
}

// TestSweepUnderLoad sweeps, and rebuilds a shard's map, while decisions
// run on it (for the race detector); afterwards every identity decided is
// still counted exactly.
func TestSweepUnderLoad(t *testing.T) {
	l, st := newLimiter(t, memstore.Options{Shards: 1, MaxKeys: 50_000, SweepInterval: -1})
	ctx := context.Background()
	ps := short(t)
	long, _ := floodgate.NewFixedWindow("long", 1_000_000, time.Hour)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	counts := make([]int64, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := l.Allow(ctx, ps[i%len(ps)], fmt.Sprint(g, "-", i)); err != nil {
					t.Error(err)
					return
				}
				if _, err := l.Allow(ctx, long, fmt.Sprint("user-", g)); err != nil {
					t.Error(err)
					return
				}
				counts[g]++
			}
		}()
	}
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		st.Sweep()
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for g, c := range counts {
		r, err := l.PeekAt(ctx, time.Now(), long, fmt.Sprint("user-", g))
		if err != nil {
			t.Fatal(err)
		}
		if want := 1_000_000 - c; r.Remaining != want {
			t.Errorf("user-%d: remaining %d after %d requests, want %d", g, r.Remaining, c, want)
		}
	}
}
