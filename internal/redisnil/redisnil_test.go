package redisnil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestIsReply(t *testing.T) {
	joined := fmt.Errorf("redis: all sentinels specified in configuration are unreachable: %w", errors.Join(redis.Nil, redis.Nil))
	for _, tc := range []struct {
		name              string
		err               error
		reply, unknownMst bool
	}{
		{"nil", nil, false, false},
		{"redis.Nil", redis.Nil, true, false},
		{"wrapped once", fmt.Errorf("GET k: %w", redis.Nil), true, false},
		{"joined, as go-redis's sentinel failure", joined, false, true},
		{"joined, wrapped again", fmt.Errorf("dial: %w", joined), false, true},
		{"other error", errors.New("redis: nil"), false, false},
	} {
		if got := IsReply(tc.err); got != tc.reply {
			t.Errorf("%s: IsReply = %v, want %v", tc.name, got, tc.reply)
		}
		if got := UnknownMaster(tc.err); got != tc.unknownMst {
			t.Errorf("%s: UnknownMaster = %v, want %v", tc.name, got, tc.unknownMst)
		}
	}
}

// TestUnknownMasterOnRealSentinels: a go-redis failover client of a name
// the sentinels do not know fails with an error wrapping redis.Nil;
// IsReply tells it from a missing key, and MasterHook names the master.
func TestUnknownMasterOnRealSentinels(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, hook := range []bool{false, true} {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "wrongname", SentinelAddrs: s.SentinelAddrs, MaxRetries: -1})
		if hook {
			c.AddHook(MasterHook("wrongname"))
		}
		err := c.Get(ctx, "absent").Err()
		_ = c.Close()
		if !errors.Is(err, redis.Nil) || IsReply(err) || !UnknownMaster(err) {
			t.Fatalf("hook=%v: %v: errors.Is(redis.Nil)=%v IsReply=%v UnknownMaster=%v, want true false true",
				hook, err, errors.Is(err, redis.Nil), IsReply(err), UnknownMaster(err))
		}
		if got := strings.Contains(err.Error(), `the sentinels do not know master "wrongname"`); got != hook {
			t.Errorf("hook=%v: %v: names the master: %v", hook, err, got)
		}
	}
	c := s.FailoverClient(t)
	if err := c.Get(ctx, "absent").Err(); !IsReply(err) || UnknownMaster(err) {
		t.Errorf("a missing key on the right master: %v: IsReply=%v UnknownMaster=%v, want true false", err, IsReply(err), UnknownMaster(err))
	}
}
