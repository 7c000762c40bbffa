package sentinelfollow_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// A failover client that leaves the old primary when most sentinels name
// a new one, not only when the one it talks to does.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	opts := &redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
	}
	follow := sentinelfollow.New(opts) // before NewFailoverClient: it sets opts.Dialer
	client := redis.NewFailoverClient(opts)
	defer client.Close()
	go follow.Run(ctx, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	// ... use client, e.g. redisstore.New(client, redisstore.Options{})
}
