package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	} {
		if _, err := fleet.New(client, tc.key, tc.id, tc.opts); !errors.Is(err, fleet.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", tc.name, err)
		}
	}
	if _, err := fleet.New(nil, "k", "a", fleet.Options{}); !errors.Is(err, fleet.ErrInvalidOptions) {
		t.Errorf("nil client: %v", err)
	}
}
