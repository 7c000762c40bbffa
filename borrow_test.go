package floodgate_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// keepingStore records every key it is given and keeps it, as a Store that
// does not implement KeyBorrower may.
type keepingStore struct {
	mu   sync.Mutex
	keys []string
	mem  floodgate.Store
}

func (s *keepingStore) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	s.mu.Lock()
	for _, l := range layers {
		s.keys = append(s.keys, l.Key)
	}
	s.mu.Unlock()
	return s.mem.Decide(ctx, now, layers, out)
}

// TestKeysStayIntactForKeepingStores: a store that keeps keys gets keys
// that never change after the call, whatever the limiter builds next.
func TestKeysStayIntactForKeepingStores(t *testing.T) {
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ks := &keepingStore{mem: mem}
	l, err := floodgate.New(ks, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := floodgate.NewFixedWindow("keep", 10, time.Minute)
	var want []string
	for i := range 200 {
		id := fmt.Sprint("user-", i)
		if _, err := l.Allow(context.Background(), p, id); err != nil {
			t.Fatal(err)
		}
		want = append(want, floodgate.Key("fg", p, id))
	}
	for i, k := range ks.keys {
		if k != want[i] {
			t.Fatalf("kept key %d is %q, want %q: the limiter reused its bytes", i, k, want[i])
		}
	}
}

// TestBorrowedKeysAreCopied: memstore borrows the limiter's key buffer, so
// it must store copies; identities decided one after another through the
// same buffer keep separate, correct states, and Reset finds them.
func TestBorrowedKeysAreCopied(t *testing.T) {
	st, err := memstore.New(memstore.Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !st.BorrowsKeys() {
		t.Fatal("memstore does not borrow keys")
	}
	l, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, _ := floodgate.NewSlidingWindow("borrow", 1, time.Hour)
	long := fmt.Sprintf("%0100d", 7) // encoded as a hash: a different key length
	ids := []string{long}
	for i := range 500 {
		ids = append(ids, fmt.Sprint("u", i))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(ids); i += 4 {
				if r, err := l.Allow(ctx, p, ids[i]); err != nil || !r.Allowed {
					t.Errorf("first request of %q: %+v %v", ids[i], r, err)
				}
			}
		}()
	}
	wg.Wait()
	if st.Len() != len(ids) {
		t.Fatalf("%d keys stored, want %d", st.Len(), len(ids))
	}
	for _, id := range ids {
		if r, err := l.Allow(ctx, p, id); err != nil || r.Allowed {
			t.Fatalf("second request of %q admitted: %+v %v", id, r, err)
		}
	}
	st.Reset(l.Key(p, ids[3]))
	if r, err := l.Allow(ctx, p, ids[3]); err != nil || !r.Allowed {
		t.Fatalf("after Reset: %+v %v", r, err)
	}
}

// TestAllowAllocatesNothingOnMemstore: a decision on an existing key
// allocates nothing, key included.
func TestAllowAllocatesNothingOnMemstore(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		p := floodgate.Policy{Name: "alloc", Algorithm: a, Limit: 1 << 30, Window: time.Hour}
		if _, err := l.Allow(ctx, p, "someone"); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(200, func() {
			if _, err := l.Allow(ctx, p, "someone"); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%v: %.1f allocations per Allow, want 0", a, n)
		}
	}
}

// TestAllowLayersAllocations: a layered decision allocates its results
// (which the Decision returns) and its keys, not the layers it hands the
// store.
func TestAllowLayersAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	specs := []floodgate.LayerSpec{
		{Policy: floodgate.Policy{Name: "global", Algorithm: floodgate.SlidingWindow, Limit: 1 << 30, Window: time.Hour}, Identity: "all"},
		{Policy: floodgate.Policy{Name: "user", Algorithm: floodgate.TokenBucket, Limit: 1 << 30, Window: time.Hour}, Identity: "someone"},
	}
	if _, err := l.AllowLayers(ctx, 1, specs...); err != nil {
		t.Fatal(err)
	}
	want := float64(1 + len(specs)) // the results and one key per layer
	if n := testing.AllocsPerRun(200, func() {
		d, err := l.AllowLayers(ctx, 1, specs...)
		if err != nil || !d.Allowed {
			t.Fatalf("AllowLayers: %+v %v", d, err)
		}
	}); n > want {
		t.Errorf("%.1f allocations per AllowLayers, want at most %.0f", n, want)
	}
}
