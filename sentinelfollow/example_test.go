package sentinelfollow_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// A failover client that leaves the old primary when most sentinels name
// a new one, not only when the one it talks to does, and goes on dialling
// the primary they named last while they cannot answer.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	opts := &redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
	}
	client, follow := sentinelfollow.NewClient(opts)
	defer client.Close()
	go follow.Run(ctx, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	// ... use client, e.g. redisstore.New(client, redisstore.Options{})
}
