package config_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestRedisPasswordOutsideTheURL: a password given apart from the URL (read
// from a file by serve) authenticates; a password in both places is
// refused rather than one silently winning.
func TestRedisPasswordOutsideTheURL(t *testing.T) {
	const pw = "pw-from-a-file-0123456789"
	rs := redistest.Start(t)
	ctx := context.Background()
	// redistest waits for an unauthenticated PING: require the password
	// once the server runs, and drop it again before the server stops.
	admin := rs.Client(t)
	if err := admin.ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr, Password: pw})
		defer c.Close()
		_ = c.ConfigSet(context.Background(), "requirepass", "").Err()
	})
	c, err := config.Redis{URL: "redis://" + rs.Addr + "/0", Password: pw}.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password apart from the URL: %v", err)
	}
	bare, err := config.Redis{URL: "redis://" + rs.Addr}.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if err := bare.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without a password: %v, want NOAUTH", err)
	}
	for _, url := range []string{"redis://:other@" + rs.Addr, "redis-cluster://:other@" + rs.Addr, "redis-sentinel://:other@" + rs.Addr + "?master=m"} {
		if _, err := (config.Redis{URL: url, Password: pw}).Client(); !errors.Is(err, config.ErrRedisURL) || strings.Contains(err.Error(), pw) {
			t.Fatalf("%s and a separate password: %v, want ErrRedisURL without the password", url, err)
		}
	}
}
