package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestMemoryMaxKeysIsTheStores: a MemoryStore of 64 partitions holds
// exactly MaxKeys identity periods of distinct identities, one after
// another or all at once, and refuses the next with ErrStoreFull. Each
// partition used to hold only its share of MaxKeys, so a new identity
// was refused as soon as its partition was full: with MaxKeys 2 the
// second identity, with 1000 the first refusal came at about the 500th
// (an outside walk: 503 at identity #485-536 with serve's
// --memory-max-quota-periods 1000, 11 of 700 refused while the store held
// 689).
func TestMemoryMaxKeysIsTheStores(t *testing.T) {
	ctx := context.Background()
	for _, maxKeys := range []int{2, 7, 1000} {
		m, err := NewMemoryStore(MemoryOptions{MaxKeys: maxKeys})
		if err != nil {
			t.Fatal(err)
		}
		q := newQuota(t, m, monthly(100), Options{})
		for i := range maxKeys + 1 {
			r, err := q.CheckAt(ctx, t0, fmt.Sprint("user", i), 1)
			if i < maxKeys && (err != nil || !r.Allowed) {
				periods, _ := m.Len()
				t.Fatalf("MaxKeys %d: identity #%d: %+v, %v (%d periods held)", maxKeys, i+1, r, err, periods)
			}
			if i == maxKeys && !errors.Is(err, floodgate.ErrStoreFull) {
				t.Fatalf("MaxKeys %d: identity #%d: %+v, %v; want ErrStoreFull", maxKeys, i+1, r, err)
			}
		}
		if periods, _ := m.Len(); periods != maxKeys {
			t.Fatalf("MaxKeys %d: %d periods held", maxKeys, periods)
		}
		// Held identities go on.
		if r, err := q.CheckAt(ctx, t0, "user0", 1); err != nil || r.Used != 2 {
			t.Fatalf("MaxKeys %d: a held identity at the bound: %+v, %v", maxKeys, r, err)
		}
	}
}

// TestMemoryMaxKeysExactConcurrently: goroutines check distinct
// identities at once, 4 % more than MaxKeys; exactly MaxKeys periods are
// created, every other check refused with ErrStoreFull (per partition,
// hundreds more were refused); once the periods expire (25 hours after
// their month's end), as many new identities are held again.
func TestMemoryMaxKeysExactConcurrently(t *testing.T) {
	const maxKeys, workers, per = 1000, 8, 130
	ctx := context.Background()
	m, err := NewMemoryStore(MemoryOptions{MaxKeys: maxKeys})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, m, monthly(100), Options{})
	run := func(at time.Time, prefix string) (held, full int64) {
		t.Helper()
		var wg sync.WaitGroup
		var heldN, fullN atomic.Int64
		for g := range workers {
			wg.Go(func() {
				for i := range per {
					_, err := q.CheckAt(ctx, at, fmt.Sprintf("%s%d-%d", prefix, g, i), 1)
					switch {
					case err == nil:
						heldN.Add(1)
					case errors.Is(err, floodgate.ErrStoreFull):
						fullN.Add(1)
					default:
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return heldN.Load(), fullN.Load()
	}
	if held, full := run(t0, "a"); held != maxKeys || full != workers*per-maxKeys {
		t.Fatalf("%d held, %d refused of %d; want %d held", held, full, workers*per, maxKeys)
	}
	later := t0.AddDate(0, 2, 0)
	if held, full := run(later, "b"); held != maxKeys || full != workers*per-maxKeys {
		t.Fatalf("after the periods expired: %d held, %d refused; want %d held", held, full, maxKeys)
	}
}

// TestMemoryMaxRecordsExactConcurrently: reservations of distinct
// identities at once take exactly MaxRecords records across the store's
// partitions, the others refused with ErrStoreFull.
func TestMemoryMaxRecordsExactConcurrently(t *testing.T) {
	const maxRecords, workers, per = 500, 8, 70
	ctx := context.Background()
	m, err := NewMemoryStore(MemoryOptions{MaxRecords: maxRecords})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, m, monthly(100), Options{})
	var held, full atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range per {
				_, err := q.ReserveAt(ctx, t0, fmt.Sprintf("u%d-%d", g, i), "r", 1)
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
	if _, records := m.Len(); held.Load() != maxRecords || records != maxRecords {
		t.Fatalf("%d reservations held (%d records), %d refused; want %d", held.Load(), records, full.Load(), maxRecords)
	}
}
