package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/fleet"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestFleetCount: instances beating into one set see each other; one that
// leaves is gone at the next beat, one that dies silently after the TTL.
func TestFleetCount(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	key := fmt.Sprintf("fleet%d:instances", time.Now().UnixNano())
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	reg := prometheus.NewRegistry()
	var seen []int
	a, err := fleet.New(client, key, "a", fleet.Options{Interval: time.Second, Now: clock, Registerer: reg,
		OnCount: func(n int) { seen = append(seen, n) }})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := fleet.New(client, key, "b", fleet.Options{Interval: time.Second, Now: clock})
	c, _ := fleet.New(client, key, "c", fleet.Options{Interval: time.Second, Now: clock})
	if a.Count() != 0 {
		t.Fatalf("count before the first beat: %d", a.Count())
	}
	step := func(what string, h *fleet.Heartbeat, want int) {
		t.Helper()
		n, err := h.Beat(ctx)
		if err != nil || n != want || h.Count() != want {
			t.Fatalf("%s: beat = %d, %v (Count %d); want %d", what, n, err, h.Count(), want)
		}
	}
	step("a alone", a, 1)
	step("b joins", b, 2)
	step("c joins", c, 3)
	step("a sees three", a, 3)
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	step("c left", a, 2)
	advance(2 * time.Second)
	step("b beats", b, 2) // a's beat is 2s old, within the 3s TTL
	advance(2 * time.Second)
	step("a beats again", a, 2)
	advance(3500 * time.Millisecond)
	step("b silent 5.5s, gone", a, 1)
	if n, err := testutil.GatherAndCount(reg, "floodgate_instances_live"); n != 1 || err != nil {
		t.Fatalf("gauge series %d, %v", n, err)
	}
	if mfs, _ := reg.Gather(); mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("gauge %v, want 1", mfs[0].GetMetric()[0].GetGauge().GetValue())
	}
	if fmt.Sprint(seen) != "[1 3 2 2 1]" {
		t.Fatalf("OnCount saw %v", seen)
	}
	ttl, _ := client.PTTL(ctx, key).Result()
	if ttl <= 0 || ttl > 6*time.Second {
		t.Fatalf("set TTL %v, want (0, 6s]", ttl)
	}
	// Redis down: the beat fails and the last count stays.
	rs.Kill()
	if _, err := a.Beat(ctx); err == nil {
		t.Fatal("beat with Redis down did not fail")
	}
	if a.Count() != 1 {
		t.Fatalf("count after a failed beat %d, want the last one (1)", a.Count())
	}
}

func TestFleetOptions(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	for _, tc := range []struct {
		name    string
		key, id string
		opts    fleet.Options
	}{
		{"empty key", "", "a", fleet.Options{}},
		{"empty id", "k", "", fleet.Options{}},
		{"short interval", "k", "a", fleet.Options{Interval: time.Millisecond}},
		{"ttl below two beats", "k", "a", fleet.Options{Interval: time.Second, TTL: time.Second}},
		{"negative interval", "k", "a", fleet.Options{Interval: -time.Second}},
		{"interval above MaxInterval", "k", "a", fleet.Options{Interval: fleet.MaxInterval + time.Second}},
		{"ttl above MaxTTL", "k", "a", fleet.Options{Interval: time.Hour, TTL: 72 * time.Hour}},
	} {
		if _, err := fleet.New(client, tc.key, tc.id, tc.opts); !errors.Is(err, fleet.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", tc.name, err)
		}
	}
	// A nil pointer in the interface is refused too: it is not == nil, and
	// an outside walk saw New accept one and Beat then panic.
	for _, c := range []fleet.Client{nil, (*redis.Client)(nil), (*redis.ClusterClient)(nil)} {
		if _, err := fleet.New(c, "k", "a", fleet.Options{}); !errors.Is(err, fleet.ErrInvalidOptions) {
			t.Errorf("nil client %T: %v, want ErrInvalidOptions", c, err)
		}
	}
}

// TestFleetIntervalBounds: every Interval up to MaxInterval can be set
// without a TTL (the default, 3 × Interval, stops at MaxTTL); an outside
// walk found any Interval above 8h refused for a TTL it had not set, and
// none above 12h possible. The error for a longer one names the bound.
func TestFleetIntervalBounds(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		interval, ttl, want time.Duration
	}{
		{time.Second, 0, 3 * time.Second},
		{8 * time.Hour, 0, fleet.MaxTTL},
		{10 * time.Hour, 0, fleet.MaxTTL},
		{fleet.MaxInterval, 0, fleet.MaxTTL},
		{fleet.MaxInterval, fleet.MaxTTL, fleet.MaxTTL},
		{time.Hour, 2 * time.Hour, 2 * time.Hour},
	} {
		key := fmt.Sprintf("fleet%d:instances", time.Now().UnixNano())
		h, err := fleet.New(client, key, "a", fleet.Options{Interval: tc.interval, TTL: tc.ttl})
		if err != nil {
			t.Fatalf("interval %v, TTL %v: %v", tc.interval, tc.ttl, err)
		}
		if _, err := h.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		// The set expires after two TTLs.
		got, err := client.PTTL(ctx, key).Result()
		if err != nil || got <= 2*tc.want-time.Minute || got > 2*tc.want {
			t.Errorf("interval %v, TTL %v: set expires in %v (%v), want 2 × %v", tc.interval, tc.ttl, got, err, tc.want)
		}
	}
	_, err := fleet.New(client, "k", "a", fleet.Options{Interval: 13 * time.Hour})
	if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "above 12h0m0s") {
		t.Errorf("interval 13h: %v, want ErrInvalidOptions naming the 12h maximum", err)
	}
}

// TestOnRejoin: a beat that finds this instance gone from the set after an
// earlier beat had put it there (the set lost: a Redis restarted empty
// between two beats, which no beat sees fail) calls OnRejoin, once; the
// first beat does not.
func TestOnRejoin(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	key := fmt.Sprintf("fleet%d:instances", time.Now().UnixNano())
	rejoined := 0
	h, err := fleet.New(client, key, "a", fleet.Options{OnRejoin: func() { rejoined++ }})
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		lose bool
		want int
	}{{false, 0}, {false, 0}, {true, 1}, {false, 1}} {
		if step.lose {
			if err := client.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := h.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		if rejoined != step.want {
			t.Fatalf("beat %d (set lost before: %v): OnRejoin called %d times, want %d", i+1, step.lose, rejoined, step.want)
		}
	}
}

// TestAfterBeat: Run calls AfterBeat after each successful beat, with a
// context bounded by the interval, and not after a failed one.
func TestAfterBeat(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	key := fmt.Sprintf("afterbeat%d:instances", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	after := make(chan bool, 1)
	h, err := fleet.New(client, key, "a", fleet.Options{Interval: 50 * time.Millisecond, AfterBeat: func(bctx context.Context) {
		_, bounded := bctx.Deadline()
		n, _ := client.ZCard(bctx, key).Result()
		select {
		case after <- bounded && n == 1:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	if ok := <-after; !ok {
		t.Fatal("AfterBeat called without a deadline, or before the beat was in the set")
	}
	cancel()
	<-done
	// A beat that fails (Redis gone) is not followed by AfterBeat.
	rs.Stop()
	called := false
	failed := make(chan struct{}, 1)
	h2, _ := fleet.New(client, key, "b", fleet.Options{Interval: 50 * time.Millisecond,
		AfterBeat: func(context.Context) { called = true },
		OnError: func(error) {
			select {
			case failed <- struct{}{}:
			default:
			}
		}})
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- h2.Run(ctx2) }()
	<-failed
	cancel2()
	<-done
	if called {
		t.Fatal("AfterBeat called after a failed beat")
	}
}
