package memstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestDecideNilContext: Decide given a nil context returns an error
// wrapping floodgate.ErrNilContext and counts nothing, as the Limiter
// does; it panicked (ctx.Err()) for a caller of the Store itself.
func TestDecideNilContext(t *testing.T) {
	s, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := floodgate.Must(floodgate.NewFixedWindow("p", 1, time.Minute))
	layers := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
	out := make([]floodgate.Result, 1)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var noCtx context.Context
	err = s.Decide(noCtx, now, layers, out)
	if !errors.Is(err, floodgate.ErrNilContext) || !strings.HasPrefix(err.Error(), "memstore: ") {
		t.Fatalf("nil context: %v, want memstore: ... ErrNilContext", err)
	}
	// Nothing was counted: the one request of the limit is still there.
	if err := s.Decide(context.Background(), now, layers, out); err != nil || !out[0].Allowed {
		t.Fatalf("after a nil context: %+v, %v; want the request admitted", out[0], err)
	}
}
