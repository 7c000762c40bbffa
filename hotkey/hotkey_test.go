package hotkey

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func policy(t testing.TB, alg floodgate.Algorithm, limit, burst int64) floodgate.Policy {
	t.Helper()
	p := floodgate.Policy{Name: "global", Algorithm: alg, Limit: limit, Window: time.Hour, Burst: burst}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func memLimiter(t testing.TB) *floodgate.Limiter {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: "hk"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestShards(t *testing.T) {
	limits := func(ps []floodgate.Policy) (l, b []int64) {
		for _, p := range ps {
			l, b = append(l, p.Limit), append(b, p.Burst)
		}
		return l, b
	}
	for _, tt := range []struct {
		name    string
		p       floodgate.Policy
		n       int
		split   Split
		limits  []int64
		bursts  []int64
		wantErr bool
	}{
		{name: "exact", p: policy(t, floodgate.FixedWindow, 10, 0), n: 3, split: SplitExact, limits: []int64{4, 3, 3}, bursts: []int64{0, 0, 0}},
		{name: "ceil", p: policy(t, floodgate.FixedWindow, 10, 0), n: 3, split: SplitCeil, limits: []int64{4, 4, 4}, bursts: []int64{0, 0, 0}},
		{name: "even", p: policy(t, floodgate.SlidingWindow, 12, 0), n: 4, split: SplitCeil, limits: []int64{3, 3, 3, 3}, bursts: []int64{0, 0, 0, 0}},
		{name: "burst split too", p: policy(t, floodgate.TokenBucket, 100, 7), n: 2, split: SplitExact, limits: []int64{50, 50}, bursts: []int64{4, 3}},
		{name: "one shard is the policy", p: policy(t, floodgate.GCRA, 5, 0), n: 1, limits: []int64{5}, bursts: []int64{0}},
		{name: "more shards than limit", p: policy(t, floodgate.FixedWindow, 3, 0), n: 4, wantErr: true},
		{name: "more shards than burst", p: policy(t, floodgate.TokenBucket, 100, 3), n: 4, wantErr: true},
		{name: "zero shards", p: policy(t, floodgate.FixedWindow, 3, 0), n: 0, wantErr: true},
		{name: "too many shards", p: policy(t, floodgate.FixedWindow, 1<<20, 0), n: MaxShards + 1, wantErr: true},
		{name: "unknown split", p: policy(t, floodgate.FixedWindow, 3, 0), n: 1, split: 7, wantErr: true},
		{name: "invalid policy", p: floodgate.Policy{Name: "x"}, n: 1, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := Shards(tt.p, tt.n, tt.split)
			if tt.wantErr {
				if !errors.Is(err, floodgate.ErrInvalidPolicy) {
					t.Fatalf("err = %v, want ErrInvalidPolicy", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			l, b := limits(ps)
			if !equal(l, tt.limits) || !equal(b, tt.bursts) {
				t.Fatalf("limits %v bursts %v, want %v %v", l, b, tt.limits, tt.bursts)
			}
			for _, p := range ps {
				if p.Name != tt.p.Name || p.Algorithm != tt.p.Algorithm || p.Window != tt.p.Window {
					t.Fatalf("shard %v differs from %v beyond its limit", p, tt.p)
				}
			}
		})
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestShardKeysSpreadOverSlots(t *testing.T) {
	p := policy(t, floodgate.FixedWindow, 1000, 0)
	tags := map[string]bool{}
	for i := range 16 {
		tags[algo.HashTag(floodgate.Key("fg", p, ShardIdentity("global", i)))] = true
	}
	if len(tags) != 16 {
		t.Fatalf("16 shards share %d hash tags", len(tags))
	}
}

// traffic replays a sequence of request costs one by one against l and
// measures the error bounds: the total admitted after every request (never
// above L), premature denials (a request denied although the shards
// together still had room for it), and the total at saturation.
type measure struct {
	admitted       int64
	premature      int
	firstPremature int64 // total admitted at the first premature denial, -1 if none
}

func replay(t *testing.T, l *Limiter, costs []int64) measure {
	t.Helper()
	ctx := context.Background()
	used := make([]int64, len(l.shards))
	m := measure{firstPremature: -1}
	room := func() int64 {
		var r int64
		for i, p := range l.shards {
			r += p.Limit - used[i]
		}
		return r
	}
	for k, c := range costs {
		free := room()
		r, err := l.AllowAt(ctx, t0, "api", c)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			used[r.Shard] += c
			m.admitted += c
		} else if free >= c {
			if m.premature == 0 {
				m.firstPremature = m.admitted
			}
			m.premature++
		}
		if m.admitted > l.policy.Limit {
			t.Fatalf("request %d: %d admitted, above the global limit %d", k, m.admitted, l.policy.Limit)
		}
	}
	return m
}

// TestUnderAdmissionUnevenTraffic: round-robin over 4 shards of a global
// 400 with costs 7,1,1,1 repeating, so shard 0 takes every heavy request
// and fills first. Total admitted never exceeds 400; once every shard is
// saturated at most N·(c_max−1) = 24 units are left unused; premature
// denials (denied while others had room) are measured with and without
// RetryOther.
func TestUnderAdmissionUnevenTraffic(t *testing.T) {
	var costs []int64
	for range 2000 {
		costs = append(costs, 7, 1, 1, 1)
	}
	const n, limit, cmax = 4, 400, 7
	var without, with measure
	for _, retry := range []bool{false, true} {
		l, err := New(memLimiter(t), policy(t, floodgate.FixedWindow, limit, 0), Options{Shards: n, RetryOther: retry})
		if err != nil {
			t.Fatal(err)
		}
		m := replay(t, l, costs)
		t.Logf("retry=%v: admitted %d of %d at saturation; %d premature denials, the first at %d admitted",
			retry, m.admitted, limit, m.premature, m.firstPremature)
		if limit-m.admitted > n*(cmax-1) {
			t.Fatalf("retry=%v: %d admitted at saturation, below the bound %d", retry, m.admitted, limit-n*(cmax-1))
		}
		if retry {
			with = m
		} else {
			without = m
		}
	}
	// Without retry, shard 0 (limit 100, 7 per request) denies from the
	// 15th round on while the light shards still have room.
	if without.premature == 0 || without.firstPremature != 14*7+14*3 {
		t.Fatalf("without retry: %+v; want premature denials starting at %d admitted", without, 14*7+14*3)
	}
	if with.premature >= without.premature || with.admitted < without.admitted {
		t.Fatalf("retry did not help: %+v vs %+v", with, without)
	}
}

// TestUnderAdmissionRandomPick: with random picking the first premature
// denial can come early (a shard is unlucky), but cost-1 traffic that
// keeps coming saturates every shard: exactly L is admitted.
func TestUnderAdmissionRandomPick(t *testing.T) {
	const limit = 800
	costs := make([]int64, 20*limit)
	for i := range costs {
		costs[i] = 1
	}
	l, err := New(memLimiter(t), policy(t, floodgate.SlidingLog, limit, 0), Options{Shards: 8, Pick: PickRandom})
	if err != nil {
		t.Fatal(err)
	}
	m := replay(t, l, costs)
	t.Logf("random: %d premature denials, the first at %d admitted of %d", m.premature, m.firstPremature, limit)
	if m.admitted != limit {
		t.Fatalf("admitted %d at saturation, want exactly %d", m.admitted, limit)
	}
}

// TestConcurrentShardedExact: 50 goroutines × 40 requests over 8 shards of
// a global 1,000 → exactly 1,000 admitted (round-robin spreads the 2,000
// requests 250 per shard, more than each share of 125), on memory and on
// a real Redis through redisstore.
func TestConcurrentShardedExact(t *testing.T) {
	run := func(t *testing.T, lim *floodgate.Limiter) {
		l, err := New(lim, policy(t, floodgate.FixedWindow, 1000, 0), Options{Shards: 8})
		if err != nil {
			t.Fatal(err)
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				for range 40 {
					r, err := l.AllowAt(context.Background(), t0, "edge", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != 1000 {
			t.Fatalf("%d admitted, want exactly 1000", got)
		}
	}
	t.Run("memory", func(t *testing.T) { run(t, memLimiter(t)) })
	t.Run("redis", func(t *testing.T) { run(t, redisLimiter(t, redistest.Start(t).Client(t))) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Redis Cluster")
		}
		run(t, redisLimiter(t, redistest.StartCluster(t).Client(t)))
	})
}

func redisLimiter(t testing.TB, c redisstore.Client) *floodgate.Limiter {
	t.Helper()
	st, err := redisstore.New(c, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: "hk"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLayer uses a shard as one layer of an all-or-nothing decision with a
// per-user limit: when the user layer denies, the global shard consumes
// nothing.
func TestLayer(t *testing.T) {
	lim := memLimiter(t)
	l, err := New(lim, policy(t, floodgate.FixedWindow, 4, 0), Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	user := floodgate.Policy{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour}
	ctx := context.Background()
	for i, want := range []bool{true, false, false} {
		d, err := lim.AllowLayersAt(ctx, t0, 1, l.Layer("api"), floodgate.LayerSpec{Policy: user, Identity: "alice"})
		if err != nil || d.Allowed != want {
			t.Fatalf("request %d: %+v, %v; want allowed=%v", i, d, err, want)
		}
	}
	// Alice's denials consumed nothing globally: 3 of 4 are left.
	var left int64
	for i, p := range l.ShardPolicies() {
		r, err := lim.PeekAt(ctx, t0, p, ShardIdentity("api", i))
		if err != nil {
			t.Fatal(err)
		}
		left += r.Remaining
	}
	if left != 3 {
		t.Fatalf("%d left globally, want 3", left)
	}
}

func TestNewValidates(t *testing.T) {
	lim := memLimiter(t)
	p := policy(t, floodgate.FixedWindow, 10, 0)
	for _, tt := range []struct {
		name string
		lim  *floodgate.Limiter
		opts Options
	}{
		{"nil limiter", nil, Options{Shards: 2}},
		{"no shards", lim, Options{}},
		{"unknown pick", lim, Options{Shards: 2, Pick: 9}},
		{"unknown split", lim, Options{Shards: 2, Split: 9}},
	} {
		if _, err := New(tt.lim, p, tt.opts); !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("%s: %v, want ErrInvalidPolicy", tt.name, err)
		}
	}
	l, err := New(lim, p, Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowAt(context.Background(), t0, "x", -1); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("negative cost: %v", err)
	}
}
