package denycache

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestDecideNilContext: Decide given a nil context returns an error
// wrapping floodgate.ErrNilContext, whether or not a remembered denial
// covers the layers. It answered a covered decision from the cache with a
// nil error, and passed an uncovered one on to the wrapped store.
func TestDecideNilContext(t *testing.T) {
	_, c, cnt := cached(t, newMem(t), Options{MaxTTL: time.Hour})
	p := floodgate.Must(floodgate.NewFixedWindow("p", 1, time.Minute))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	layers := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
	out := make([]floodgate.Result, 1)
	var noCtx context.Context
	check := func(what string) {
		t.Helper()
		calls := cnt.calls.Load()
		err := c.Decide(noCtx, now, layers, out)
		if !errors.Is(err, floodgate.ErrNilContext) || !strings.HasPrefix(err.Error(), "denycache: ") {
			t.Fatalf("%s: %v, want denycache: ... ErrNilContext", what, err)
		}
		if cnt.calls.Load() != calls {
			t.Fatalf("%s: the wrapped store was asked", what)
		}
	}
	check("nothing cached")
	for range 2 {
		if err := c.Decide(context.Background(), now, layers, out); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].Allowed {
		t.Fatal("second request admitted at limit 1")
	}
	check("a denial cached")
}

// TestDecideDoneContext: a context already cancelled is answered with an
// error wrapping floodgate.ErrStoreUnavailable and context.Canceled, as
// memstore and redisstore answer it, also when a cached denial covers the
// request; the cache answered that denial with a nil error.
func TestDecideDoneContext(t *testing.T) {
	_, c, cnt := cached(t, newMem(t), Options{MaxTTL: time.Hour})
	p := floodgate.Must(floodgate.NewFixedWindow("p", 1, time.Minute))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	layers := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
	out := make([]floodgate.Result, 1)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(what string) {
		t.Helper()
		calls, saved := cnt.calls.Load(), c.Saved()
		out[0] = floodgate.Result{}
		err := c.Decide(done, now, layers, out)
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: %v (result %+v), want an error wrapping ErrStoreUnavailable and context.Canceled", what, err, out[0])
		}
		if cnt.calls.Load() != calls || c.Saved() != saved {
			t.Fatalf("%s: the wrapped store was asked or the cache answered", what)
		}
	}
	check("nothing cached")
	for range 2 {
		if err := c.Decide(context.Background(), now, layers, out); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].Allowed {
		t.Fatal("second request admitted at limit 1")
	}
	check("a denial cached")
}
