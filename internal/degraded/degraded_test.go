package degraded_test

import (
	"context"
	"sync"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/denycache"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/degraded"
	"github.com/floodgate-rl/floodgate/memstore"
)

// embedded is a type of the caller's own embedding a *floodgate.Limiter.
type embedded struct{ *floodgate.Limiter }

// opaque is a Decider of the caller's own around a Limiter: Reports
// cannot see into it.
type opaque struct{ l *floodgate.Limiter }

// TestReports: a fallback.Store, and a Limiter deciding against one,
// report degraded decisions, also through a denycache.Store (its Unwrap)
// and from a type embedding the Limiter; a memstore and its Limiter do
// not. Only a value that is neither a store nor a Limiter is unknown.
func TestReports(t *testing.T) {
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(mem, local, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	memLim, err := floodgate.New(mem, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fbLim, err := floodgate.New(fb, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dcFb, err := denycache.New(fb, denycache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dcMem, err := denycache.New(mem, denycache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dcFbLim, err := floodgate.New(dcFb, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dcMemLim, err := floodgate.New(dcMem, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		d           any
		want, known bool
	}{
		{"memstore", mem, false, true},
		{"Limiter on memstore", memLim, false, true},
		{"fallback.Store", fb, true, true},
		{"Limiter on fallback.Store", fbLim, true, true},
		{"denycache on fallback.Store", dcFb, true, true},
		{"Limiter on denycache on fallback.Store", dcFbLim, true, true},
		{"Limiter on denycache on memstore", dcMemLim, false, true},
		{"embedded Limiter on fallback.Store", embedded{fbLim}, true, true},
		{"embedded Limiter on memstore", embedded{memLim}, false, true},
		{"opaque Decider", opaque{fbLim}, false, false},
		{"nil", nil, false, true},
		{"nil *Limiter", (*floodgate.Limiter)(nil), false, false},
		{"nil *fallback.Store", (*fallback.Store)(nil), false, true},
	} {
		if got, known := degraded.Reports(tc.d); got != tc.want || known != tc.known {
			t.Errorf("Reports(%s) = %v, %v; want %v, %v", tc.name, got, known, tc.want, tc.known)
		}
	}
}

func TestNewContext(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	degraded.Note(parent, degraded.Outcome{Degraded: true, Mode: "local"}) // no Record: nothing, no panic
	ctx, rec := degraded.NewContext(parent)
	if got := rec.Outcome(); got != (degraded.Outcome{}) {
		t.Fatalf("a new Record holds %+v, want the zero Outcome", got)
	}
	if got := ctx.Value(key{}); got != "v" {
		t.Errorf("parent value lost: %v", got)
	}
}

// TestRecordKeepsTheStrictestDegraded: of several decisions noted in one
// Record, a decision of the primary erases nothing, and the strictest
// failure mode is kept (closed, then local, then open), the first of
// equals. A review found a denycache in front of a healthy fallback store
// zeroing the Outcome a first decision of the same request had marked
// degraded (10 of 10 marks lost).
func TestRecordKeepsTheStrictestDegraded(t *testing.T) {
	ctx, rec := degraded.NewContext(context.Background())
	local := degraded.Outcome{Degraded: true, Mode: "local", Reason: "timeout"}
	degraded.Note(ctx, local)
	degraded.Note(ctx, degraded.Outcome{})
	if got := rec.Outcome(); got != local {
		t.Fatalf("after a primary's decision: %+v, want %+v kept", got, local)
	}
	degraded.Note(ctx, degraded.Outcome{Degraded: true, Mode: "open", Reason: "breaker_open"})
	degraded.Note(ctx, degraded.Outcome{Degraded: true, Mode: "local", Reason: "breaker_open"})
	if got := rec.Outcome(); got != local {
		t.Fatalf("after open and another local: %+v, want the first local %+v", got, local)
	}
	closed := degraded.Outcome{Degraded: true, Mode: "closed", Reason: "unavailable"}
	degraded.Note(ctx, closed)
	if got := rec.Outcome(); got != closed {
		t.Fatalf("after closed: %+v, want %+v", got, closed)
	}
}

// TestRecordConcurrentNotes: decisions taken at once with one context
// (a Decider of the caller's own deciding two Limiters in parallel) note
// their outcomes without a data race (run with -race; a review found the
// bare Outcome written by both).
func TestRecordConcurrentNotes(t *testing.T) {
	ctx, rec := degraded.NewContext(context.Background())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				mode := "local"
				if i == 0 {
					mode = "closed"
				}
				degraded.Note(ctx, degraded.Outcome{Degraded: true, Mode: mode})
				_ = rec.Outcome()
			}
		})
	}
	wg.Wait()
	if got := rec.Outcome(); got.Mode != "closed" {
		t.Errorf("after concurrent notes: %+v, want closed kept", got)
	}
}
