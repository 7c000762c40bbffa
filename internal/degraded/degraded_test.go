package degraded_test

import (
	"context"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/degraded"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestReports: a fallback.Store, and a Limiter deciding against one,
// report degraded decisions; a memstore and its Limiter do not.
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
	for _, tc := range []struct {
		name string
		d    any
		want bool
	}{
		{"memstore", mem, false},
		{"Limiter on memstore", memLim, false},
		{"fallback.Store", fb, true},
		{"Limiter on fallback.Store", fbLim, true},
		{"nil", nil, false},
		{"nil *Limiter", (*floodgate.Limiter)(nil), false},
		{"nil *fallback.Store", (*fallback.Store)(nil), false},
	} {
		if got := degraded.Reports(tc.d); got != tc.want {
			t.Errorf("Reports(%s) = %v, want %v", tc.name, got, tc.want)
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
