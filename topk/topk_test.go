package topk_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate/topk"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTracker(t *testing.T, opts topk.Options) *topk.Tracker {
	t.Helper()
	tr, err := topk.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestExactBelowCapacity(t *testing.T) {
	tr := newTracker(t, topk.Options{Capacity: 10})
	for i, n := range []uint64{5, 3, 8, 3} {
		tr.Add(fmt.Sprint("k", i), n)
	}
	tr.Add("k1", 2)
	tr.Add("k0", 0) // ignored
	got := tr.Top(3)
	want := []topk.Item{{"k2", 8, 0}, {"k0", 5, 0}, {"k1", 5, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Top(3) = %v, want %v", got, want)
	}
	if all := tr.Top(0); len(all) != 4 {
		t.Fatalf("Top(0) returned %d items, want all 4", len(all))
	}
	if tr.Total() != 21 {
		t.Fatalf("Total = %d, want 21", tr.Total())
	}
	tr.Reset()
	if len(tr.Top(0)) != 0 || tr.Total() != 0 {
		t.Fatal("Reset kept items")
	}
}

// zipfStream returns a skewed stream over many keys and the exact counts.
func zipfStream(seed uint64, n int, keys uint64) ([]string, map[string]uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, 1.2, 1, keys-1)
	stream := make([]string, n)
	exact := map[string]uint64{}
	for i := range stream {
		k := fmt.Sprint("ip-", z.Uint64())
		stream[i] = k
		exact[k]++
	}
	return stream, exact
}

// checkGuarantees verifies Space-Saving's promises against exact counts:
// every listed count is an upper bound within Err of the truth, and every
// key above total/capacity is listed.
func checkGuarantees(t *testing.T, items []topk.Item, exact map[string]uint64, total uint64, capacity int) {
	t.Helper()
	listed := map[string]bool{}
	for _, it := range items {
		listed[it.Key] = true
		truth := exact[it.Key]
		if it.Count < truth || it.Count-it.Err > truth {
			t.Fatalf("%s: count %d err %d, but true count %d is outside [count-err, count]", it.Key, it.Count, it.Err, truth)
		}
	}
	for k, n := range exact {
		if n > total/uint64(capacity) && !listed[k] {
			t.Fatalf("%s with %d of %d (> total/capacity %d) is not listed", k, n, total, total/uint64(capacity))
		}
	}
}

func TestHeavyHittersGuarantee(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			const capacity = 50
			tr := newTracker(t, topk.Options{Capacity: capacity})
			stream, exact := zipfStream(seed, 50_000, 100_000)
			for _, k := range stream {
				tr.Add(k, 1)
			}
			items := tr.Top(0)
			if len(items) != capacity {
				t.Fatalf("%d items monitored, want the capacity %d", len(items), capacity)
			}
			checkGuarantees(t, items, exact, uint64(len(stream)), capacity)
			// The heaviest key of a Zipf stream is found exactly first.
			if items[0].Key != "ip-0" {
				t.Fatalf("top key %s, want ip-0", items[0].Key)
			}
		})
	}
}

func TestWindows(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	tr := newTracker(t, topk.Options{Capacity: 10, Window: time.Minute, Now: clk.now})
	tr.Add("old", 10)
	clk.advance(61 * time.Second) // next window: old is in the previous one
	tr.Add("new", 3)
	tr.Add("old", 1)
	got := tr.Top(0)
	want := []topk.Item{{"old", 11, 0}, {"new", 3, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after one window: %v, want %v", got, want)
	}
	clk.advance(time.Minute) // the window holding the first 10 is gone
	got = tr.Top(0)
	want = []topk.Item{{"new", 3, 0}, {"old", 1, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) || tr.Total() != 4 {
		t.Fatalf("after two windows: %v total %d, want %v total 4", got, tr.Total(), want)
	}
	clk.advance(5 * time.Minute) // idle: everything is forgotten
	if got := tr.Top(0); len(got) != 0 {
		t.Fatalf("after idling: %v, want nothing", got)
	}
}

func TestWindowMergeKeepsGuarantees(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	const capacity = 40
	tr := newTracker(t, topk.Options{Capacity: capacity, Window: time.Minute, Now: clk.now})
	s1, e1 := zipfStream(7, 20_000, 50_000)
	s2, e2 := zipfStream(8, 20_000, 50_000)
	for _, k := range s1 {
		tr.Add(k, 1)
	}
	clk.advance(time.Minute)
	for _, k := range s2 {
		tr.Add(k, 1)
	}
	exact := map[string]uint64{}
	for k, n := range e1 {
		exact[k] += n
	}
	for k, n := range e2 {
		exact[k] += n
	}
	// Capacity per window, two windows: keys above total/capacity are listed.
	checkGuarantees(t, tr.Top(0), exact, 40_000, capacity)
}

func TestLongKeysAreBounded(t *testing.T) {
	tr := newTracker(t, topk.Options{MaxKeyLen: 40})
	a := strings.Repeat("a", 1<<20)
	b := strings.Repeat("a", 1<<20-1) + "b"
	tr.Add(a, 2)
	tr.Add(b, 1)
	tr.Add("é"+strings.Repeat("é", 30), 1) // cut inside a rune
	items := tr.Top(0)
	if len(items) != 3 {
		t.Fatalf("%d items, want 3 distinct", len(items))
	}
	for _, it := range items {
		if len(it.Key) > 40 || !strings.Contains(it.Key, "~") {
			t.Fatalf("key %q (%d bytes) not shortened to 40 with a hash", it.Key, len(it.Key))
		}
		if !utf8.ValidString(it.Key) {
			t.Fatalf("key %q is not valid UTF-8", it.Key)
		}
	}
	if items[0].Count != 2 {
		t.Fatalf("the two long keys were merged: %v", items)
	}
}

func TestConcurrentAdds(t *testing.T) {
	tr := newTracker(t, topk.Options{Capacity: 5})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				tr.Add(fmt.Sprint("k", (g+i)%5), 1)
				if i%100 == 0 {
					tr.Top(3)
				}
			}
		}()
	}
	wg.Wait()
	var sum uint64
	for _, it := range tr.Top(0) {
		sum += it.Count
		if it.Err != 0 {
			t.Fatalf("%v has an error with only 5 keys in 5 counters", it)
		}
	}
	if sum != 8000 || tr.Total() != 8000 {
		t.Fatalf("counted %d (total %d), want 8000", sum, tr.Total())
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, opts := range []topk.Options{
		{Capacity: -1}, {Capacity: topk.MaxCapacity + 1}, {Window: -time.Second}, {MaxKeyLen: 5}, {MaxKeyLen: 1 << 20},
	} {
		if tr, err := topk.New(opts); !errors.Is(err, topk.ErrInvalidOptions) || tr != nil {
			t.Fatalf("New(%+v) = %v, %v; want ErrInvalidOptions", opts, tr, err)
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	tr, _ := topk.New(topk.Options{Capacity: 100})
	stream, _ := zipfStream(1, 1<<16, 1<<20)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tr.Add(stream[i&(1<<16-1)], 1)
	}
}
