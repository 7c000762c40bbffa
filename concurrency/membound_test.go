package concurrency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestMemoryMaxKeysIsTheStores: a MemoryStore of 64 partitions tracks
// exactly MaxKeys distinct identities, one after another, refusing the
// next with ErrStoreFull. Each partition used to hold only its share, so
// a new identity was refused once its partition was full: with MaxKeys 2
// at the second identity, and serve's --memory-max-leases 1000 (which
// sets MaxKeys too) held 906 of 1,000.
func TestMemoryMaxKeysIsTheStores(t *testing.T) {
	ctx := context.Background()
	for _, maxKeys := range []int{2, 7, 1000} {
		m, err := NewMemoryStore(MemoryOptions{MaxKeys: maxKeys})
		if err != nil {
			t.Fatal(err)
		}
		l := newLimiter(t, m, Policy{Name: "cap", Limit: 5, LeaseTTL: time.Minute}, "cap")
		for i := range maxKeys {
			if r, err := l.AcquireAt(ctx, t0, fmt.Sprint("user", i)); err != nil || !r.Allowed {
				t.Fatalf("MaxKeys %d: identity #%d: %+v, %v (%d leases held)", maxKeys, i+1, r, err, m.Len())
			}
		}
		r, err := l.AcquireAt(ctx, t0, "one-more")
		if !errors.Is(err, floodgate.ErrStoreFull) || !strings.Contains(err.Error(), fmt.Sprintf("%d identities tracked (cap %d)", maxKeys, maxKeys)) {
			t.Fatalf("MaxKeys %d: identity #%d: %+v, %v; want ErrStoreFull", maxKeys, maxKeys+1, r, err)
		}
		// A held identity takes another lease.
		if r, err := l.AcquireAt(ctx, t0, "user0"); err != nil || !r.Allowed {
			t.Fatalf("MaxKeys %d: a held identity at the bound: %+v, %v", maxKeys, r, err)
		}
	}
}

// TestMemoryBoundsExactConcurrently: goroutines acquire for distinct
// identities at once, 4 % more than MaxKeys; exactly MaxKeys identities are tracked, or, when
// MaxLeases is the smaller, exactly MaxLeases leases held; the other
// acquires fail with ErrStoreFull.
func TestMemoryBoundsExactConcurrently(t *testing.T) {
	const workers, per = 8, 130
	for _, opts := range []MemoryOptions{{MaxKeys: 1000}, {MaxLeases: 700}} {
		ctx := context.Background()
		m, err := NewMemoryStore(opts)
		if err != nil {
			t.Fatal(err)
		}
		l := newLimiter(t, m, Policy{Name: "cap", Limit: 5, LeaseTTL: time.Minute}, "cap")
		var held, full atomic.Int64
		var wg sync.WaitGroup
		for g := range workers {
			wg.Go(func() {
				for i := range per {
					_, err := l.AcquireAt(ctx, t0, fmt.Sprintf("u%d-%d", g, i))
					switch {
					case err == nil:
						held.Add(1)
					case errors.Is(err, floodgate.ErrStoreFull):
						full.Add(1)
					default:
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		want := int64(max(opts.MaxKeys, opts.MaxLeases))
		if held.Load() != want || int64(m.Len()) != want || full.Load() != workers*per-want {
			t.Fatalf("%+v: %d acquired (%d leases held), %d refused; want %d", opts, held.Load(), m.Len(), full.Load(), want)
		}
	}
}
