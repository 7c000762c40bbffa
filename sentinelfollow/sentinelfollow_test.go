package sentinelfollow_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/sentinelfollow"
)

// TestFollowsTheLeaderSentinelsFailover: a client whose go-redis sentinel
// leads a SENTINEL FAILOVER moves to the promoted replica within a few
// seconds of the promotion, although that sentinel publishes
// +switch-master only when the failover ends (after failover-timeout, 5 s
// here, when a second replica is slow to be reconfigured). An outside walk
// measured 5 s of writes sent to the old primary, and lost, that way.
func TestFollowsTheLeaderSentinelsFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	second := redistest.StartReplica(t, s.Primary)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitSentinelsSeeReplicas(ctx, t, s, 2)

	o := &redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: append([]string(nil), s.SentinelAddrs...), ContextTimeoutEnabled: true}
	f := sentinelfollow.New(o)
	client := redis.NewFailoverClient(o)
	defer client.Close()
	moved := make(chan [2]string, 4)
	f.OnMove(func(from, to string) { moved <- [2]string{from, to} })
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.Run(rctx, nil) }()
	defer func() { stop(); <-done }()

	if err := client.Set(ctx, "marker", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	leader := goRedisSentinel(ctx, t, s)
	old := s.Primary.Addr
	sc := redis.NewSentinelClient(&redis.Options{Addr: leader})
	defer sc.Close()
	if err := sc.Failover(ctx, s.MasterName).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER on %s: %v", leader, err)
	}
	promoted, at := waitPromotion(ctx, t, old, s.Replica.Addr, second.Addr)

	// Writes through the client reach the promoted replica soon after
	// the promotion.
	direct := redis.NewClient(&redis.Options{Addr: promoted})
	defer direct.Close()
	var reached time.Duration
	for i := 1; ; i++ {
		if err := client.Incr(ctx, "marker").Err(); err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
		if n, err := direct.Get(ctx, "marker").Int(); err == nil && n > 0 {
			reached = time.Since(at)
			break
		}
		if time.Since(at) > 20*time.Second {
			t.Fatalf("after %v, writes through the client still do not reach the promoted %s", time.Since(at), promoted)
		}
		time.Sleep(20 * time.Millisecond)
	}
	switched := leaderSwitched(ctx, sc, s.MasterName, promoted)
	t.Logf("old %s, promoted %s: writes reached the promoted replica %v after its promotion; the leader then: %v", old, promoted, reached, switched)
	if reached > 3*time.Second {
		t.Errorf("writes reached the promoted replica %v after its promotion, want within 3s", reached)
	}
	select {
	case m := <-moved:
		if m != [2]string{old, promoted} {
			t.Errorf("moved %v, want from %s to %s", m, old, promoted)
		}
	case <-time.After(5 * time.Second):
		t.Error("no move reported")
	}
	if got := f.Primary(); got != promoted {
		t.Errorf("Primary() = %s, want %s", got, promoted)
	}
}

// waitSentinelsSeeReplicas waits until every sentinel lists n healthy
// replicas (they learn of a new one from the primary's INFO, every 10 s).
func waitSentinelsSeeReplicas(ctx context.Context, t *testing.T, s *redistest.Sentinel, n int) {
	t.Helper()
	for _, a := range s.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		for {
			reps, err := sc.Replicas(ctx, s.MasterName).Result()
			ok := 0
			for _, r := range reps {
				if r["flags"] == "slave" && r["master-link-status"] == "ok" {
					ok++
				}
			}
			if err == nil && ok >= n {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("sentinel %s lists %d healthy replicas, want %d: %v", a, ok, n, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		sc.Close()
	}
}

// goRedisSentinel returns the sentinel go-redis's failover client talks
// to: the one where a client subscribes to two channels (go-redis's
// +switch-master and +replica-reconf-done; a Follower subscribes to one).
func goRedisSentinel(ctx context.Context, t *testing.T, s *redistest.Sentinel) string {
	t.Helper()
	for _, a := range s.SentinelAddrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		list, err := c.ClientList(ctx).Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(list, " sub=2 ") {
			return a
		}
	}
	t.Fatal("no sentinel has go-redis's subscription")
	return ""
}

// waitPromotion waits until one of the replicas answers ROLE master and
// returns it and when it was seen so.
func waitPromotion(ctx context.Context, t *testing.T, old string, replicas ...string) (string, time.Time) {
	t.Helper()
	for ctx.Err() == nil {
		for _, a := range replicas {
			c := redis.NewClient(&redis.Options{Addr: a})
			role, err := c.Do(ctx, "ROLE").Slice()
			c.Close()
			if err == nil && len(role) > 0 && role[0] == "master" {
				return a, time.Now()
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no replica of %s was promoted", old)
	return "", time.Time{}
}

func leaderSwitched(ctx context.Context, sc *redis.SentinelClient, master, promoted string) string {
	m, err := sc.Master(ctx, master).Result()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("master %s:%s, failover state %q", m["ip"], m["port"], m["failover-state"])
}
