package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// TestDecideNilContext: Decide given a nil context returns an error
// wrapping floodgate.ErrNilContext and sends nothing, as the Limiter
// does, batched or not; it panicked (ctx.Err()) for a caller of the Store
// itself.
func TestDecideNilContext(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, opts := range []Options{{}, {MaxBatch: 8}} {
		e := newEnvOn(t, c, []*redis.Client{c}, opts)
		p := fixed10(t)
		key := e.key(p, "u")
		var noCtx context.Context
		_, err := e.one(noCtx, vectors.T0.UnixMicro(), p, key, 1)
		if !errors.Is(err, floodgate.ErrNilContext) || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Fatalf("MaxBatch %d: %v, want redisstore: ... ErrNilContext", opts.MaxBatch, err)
		}
		if n := c.Exists(context.Background(), key).Val(); n != 0 {
			t.Fatalf("MaxBatch %d: a decision with a nil context wrote its key", opts.MaxBatch)
		}
	}
}
