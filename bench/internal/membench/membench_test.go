package membench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	return keys
}

// TestSubjectsAllow checks every subject's premise: under its open limits
// each decision on each key is allowed, from several goroutines.
func TestSubjectsAllow(t *testing.T) {
	keys := testKeys(100)
	for _, s := range Subjects() {
		t.Run(s.Name, func(t *testing.T) {
			newDecider, closeFn, err := s.Setup(keys)
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			done := make(chan error, 4)
			for range 4 {
				go func() {
					d := newDecider()
					for round := range 5 {
						for i := range keys {
							if ok, err := d(i); err != nil || !ok {
								done <- fmt.Errorf("round %d key %d: allowed=%v err=%v", round, i, ok, err)
								return
							}
						}
					}
					done <- nil
				}()
			}
			for range 4 {
				if err := <-done; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestMemstoreDirectAllocs is the zero-allocation target as a plain count:
// a decision on an existing key through Store.Decide allocates nothing.
func TestMemstoreDirectAllocs(t *testing.T) {
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		keys := testKeys(10)
		newDecider, closeFn, err := MemstoreDirect(a).Setup(keys)
		if err != nil {
			t.Fatal(err)
		}
		d := newDecider()
		for i := range keys {
			if _, err := d(i); err != nil {
				t.Fatal(err)
			}
		}
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			if ok, err := d(i % len(keys)); err != nil || !ok {
				t.Fatalf("allowed=%v err=%v", ok, err)
			}
			i++
		})
		closeFn()
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per decision on an existing key, want 0", a, allocs)
		}
	}
}

// TestMemstoreStateStaysExisting checks the premise of "existing key":
// after a key's first decision, later decisions find its state (the store
// does not drop and recreate it), for every algorithm, even after a pause
// longer than the open-rate bucket's one-millisecond TTL.
func TestMemstoreStateStaysExisting(t *testing.T) {
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		p, err := policy(a)
		if err != nil {
			t.Fatal(err)
		}
		st, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		layers := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
		out := make([]floodgate.Result, 1)
		var remaining []int64
		// The decisions' times advance 2 ms each (less than the policy's
		// 10 ms refill interval) while real time passes at least as much.
		now := time.Now().UnixMicro()
		for i := range 3 {
			if err := st.Decide(ctx, now+int64(i)*2000, layers, out); err != nil || !out[0].Allowed {
				t.Fatalf("%s: allowed=%v err=%v", a, out[0].Allowed, err)
			}
			remaining = append(remaining, out[0].Remaining)
			time.Sleep(2 * time.Millisecond)
		}
		// Remaining keeps falling: the state was found each time.
		if !(remaining[2] < remaining[1] && remaining[1] < remaining[0]) {
			t.Errorf("%s: remaining %v, want strictly decreasing", a, remaining)
		}
	}
}

func TestRunReportsDenials(t *testing.T) {
	denying := Subject{Name: "denies key 3", Setup: func([]string) (func() Decider, func(), error) {
		return func() Decider {
			return func(i int) (bool, error) { return i != 3, nil }
		}, noop, nil
	}}
	if _, err := Run(denying, testKeys(10), 1); !errors.Is(err, ErrDenied) {
		t.Errorf("err = %v, want ErrDenied", err)
	}
	if _, err := Run(XRateSingle(), nil, 1); err == nil {
		t.Error("no keys: no error")
	}
	if _, err := Run(XRateSingle(), testKeys(1), 0); err == nil {
		t.Error("parallelism 0: no error")
	}
}

func TestRunMeasures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a one-second benchmark")
	}
	r, err := Run(MemstoreDirect(floodgate.GCRA), testKeys(1000), 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.N < 1 || r.NsPerOp <= 0 || r.Callers < 2 {
		t.Errorf("result %+v", r)
	}
}
