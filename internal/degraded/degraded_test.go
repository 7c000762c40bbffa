package degraded_test

import (
	"context"
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
	if degraded.From(parent) != nil {
		t.Fatal("From found an Outcome in a context without one")
	}
	ctx, o := degraded.NewContext(parent)
	if got := degraded.From(ctx); got != o || *o != (degraded.Outcome{}) {
		t.Fatalf("From = %p (%+v), want %p, zero", got, got, o)
	}
	if got := ctx.Value(key{}); got != "v" {
		t.Errorf("parent value lost: %v", got)
	}
}
