package incident_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/incident"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
)

// check asserts what must hold in every run: Floodgate admits exactly what
// fits and its counter ends at the limit; the naive limiter incremented
// once per request it let through.
func check(t *testing.T, r incident.Report) {
	t.Helper()
	o := r.Options
	if r.Atomic.Allowed != 2 || r.Atomic.Final != o.Limit || r.OverLimit(r.Atomic) != 0 {
		t.Fatalf("floodgate: %+v, want exactly 2 allowed and the counter at %d", r.Atomic, o.Limit)
	}
	if r.Naive.Final != o.Start+int64(r.Naive.Allowed) || r.Naive.Allowed > o.Requests {
		t.Fatalf("naive: %+v from %d", r.Naive, o.Start)
	}
}

// overshoots runs the scene until the naive limiter overshoots, up to 3
// times: the race is real, not scripted, so one run alone could in theory
// be lucky.
func overshoots(t *testing.T, run func() incident.Report) incident.Report {
	t.Helper()
	var r incident.Report
	for range 3 {
		r = run()
		check(t, r)
		if r.OverLimit(r.Naive) > 0 {
			return r
		}
	}
	t.Fatalf("the naive limiter never overshot in 3 runs: %+v", r.Naive)
	return r
}

func TestIncidentInMemory(t *testing.T) {
	ctx := context.Background()
	r := overshoots(t, func() incident.Report {
		env, err := incident.Memory("demo")
		if err != nil {
			t.Fatal(err)
		}
		r, err := incident.Run(ctx, env, incident.Options{Gap: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
	if o := r.Options; o.Limit != 1000 || o.Start != 998 || o.Requests != 50 {
		t.Fatalf("defaults %+v", o)
	}
	out := r.String()
	for _, want := range []string{
		"limit 1000 requests per hour per API key, counter at 998",
		"50 requests arrive at the same moment. 2 of them fit",
		"  floodgate (one atomic step):     2 allowed, counter 998 → 1000, 0 over the limit\n",
		fmt.Sprintf("  naive GET → compare → INCR:   %4d allowed, counter 998 → %d, %d over the limit\n", r.Naive.Allowed, r.Naive.Final, r.Naive.Allowed-2),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestIncidentOnRedis(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	client := rs.Client(t)
	overshoots(t, func() incident.Report {
		env, err := incident.Redis(client, fmt.Sprintf("demo-%d", time.Now().UnixNano()), rs.Addr)
		if err != nil {
			t.Fatal(err)
		}
		r, err := incident.Run(ctx, env, incident.Options{Gap: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.String(), "on Redis "+rs.Addr) {
			t.Errorf("report does not name the server:\n%s", r)
		}
		return r
	})
	// The run deleted every key it wrote (this server is private to the
	// test, so it must be empty).
	if n, err := client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys left behind (%v)", n, err)
	}
}

func TestIncidentOptions(t *testing.T) {
	env, err := incident.Memory("demo")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range []incident.Options{
		{Limit: -1}, {Limit: 10, Start: 11}, {Start: -1}, {Requests: -5}, {Requests: 10_001}, {Gap: -time.Millisecond}, {Gap: 2 * time.Second},
	} {
		if _, err := incident.Run(ctx, env, o); !errors.Is(err, incident.ErrInvalidOptions) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := incident.Run(ctx, incident.Env{}, incident.Options{}); !errors.Is(err, incident.ErrInvalidOptions) {
		t.Errorf("empty environment: %v", err)
	}
	// Starting from zero with fewer requests than the limit, both
	// limiters admit everything: the race only matters at the edge.
	r, err := incident.Run(ctx, env, incident.Options{Limit: 100, StartAtZero: true, Requests: 40, Gap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Fits() != 40 || r.Atomic.Allowed != 40 || r.Atomic.Final != 40 || r.Naive.Allowed != 40 || r.Naive.Final != 40 {
		t.Fatalf("from zero: %+v", r)
	}
}

// TestReportSaysWhatHappened: the explanation matches the numbers: "every
// request read the counter first" only when every request got through (an
// outside run on Redis let 12 to 43 of 50 through and printed it each
// time).
func TestReportSaysWhatHappened(t *testing.T) {
	opts := incident.Options{Limit: 1000, Start: 998, Requests: 50}
	for _, tc := range []struct {
		naive      incident.Outcome
		want, nots string
	}{
		{incident.Outcome{Allowed: 50, Final: 1048}, "48 requests too many through: every request read the", "50 requests read"},
		{incident.Outcome{Allowed: 12, Final: 1010}, "10 requests too many through: 12 requests read the counter", "every request"},
		{incident.Outcome{Allowed: 2, Final: 1000}, "happened not to overshoot", "too many"},
	} {
		r := incident.Report{Options: opts, Backend: "test", Naive: tc.naive, Atomic: incident.Outcome{Allowed: 2, Final: 1000}}
		out := r.String()
		if !strings.Contains(out, tc.want) || strings.Contains(out, tc.nots) {
			t.Errorf("naive %+v: report\n%s\nwant %q, not %q", tc.naive, out, tc.want, tc.nots)
		}
	}
}

// TestReportCountsAgree: counts of one take the singular ("limit 1
// request per hour", "let 1 request too many"; an outside walk saw "1
// requests").
func TestReportCountsAgree(t *testing.T) {
	for _, tc := range []struct {
		r          incident.Report
		want, nots []string
	}{
		{
			incident.Report{Options: incident.Options{Limit: 1, Requests: 3}, Naive: incident.Outcome{Allowed: 2, Final: 2}, Atomic: incident.Outcome{Allowed: 1, Final: 1}},
			[]string{"limit 1 request per hour", "3 requests arrive at the same moment. 1 of them fits under", "let 1 request too many through: 2 requests read the counter"},
			[]string{"1 requests", "1 of them fit "},
		},
		{
			incident.Report{Options: incident.Options{Limit: 5, Start: 3, Requests: 4}, Naive: incident.Outcome{Allowed: 4, Final: 7}, Atomic: incident.Outcome{Allowed: 2, Final: 5}},
			[]string{"limit 5 requests per hour", "4 requests arrive", "2 of them fit under", "let 2 requests too many through: every request"},
			[]string{"fits"},
		},
		{
			incident.Report{Options: incident.Options{Limit: 2, Start: 1, Requests: 1}, Naive: incident.Outcome{Allowed: 1, Final: 2}, Atomic: incident.Outcome{Allowed: 1, Final: 2}},
			[]string{"1 request arrives at the same moment. 1 of them fits"},
			[]string{"1 requests"},
		},
	} {
		out := tc.r.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("report lacks %q:\n%s", w, out)
			}
		}
		for _, n := range tc.nots {
			if strings.Contains(out, n) {
				t.Errorf("report has %q:\n%s", n, out)
			}
		}
	}
}

// TestMemoryRunsAgain: Run deletes what it wrote on a Memory environment
// too, so a second run on the same environment starts from the same
// state: with the defaults it presets the counter again, and with limit 1
// Floodgate admits the one request that fits both times (an outside walk
// saw the second run refused, or admit 0 of a limit of 1, when Memory's
// store kept the first run's count).
func TestMemoryRunsAgain(t *testing.T) {
	ctx := context.Background()
	for _, o := range []incident.Options{
		{Gap: time.Millisecond},
		{Limit: 1, Requests: 5, Gap: time.Millisecond},
		{Limit: 10, StartAtZero: true, Requests: 4, Gap: time.Millisecond},
	} {
		env, err := incident.Memory("demo")
		if err != nil {
			t.Fatal(err)
		}
		for run := 1; run <= 2; run++ {
			r, err := incident.Run(ctx, env, o)
			if err != nil {
				t.Fatalf("%+v, run %d: %v", o, run, err)
			}
			if want := r.Fits(); r.Atomic.Allowed != want || r.Atomic.Final != r.Options.Start+int64(want) {
				t.Fatalf("%+v, run %d: floodgate %+v, want %d allowed, counter %d", o, run, r.Atomic, want, r.Options.Start+int64(want))
			}
		}
	}
}

// TestRunRefusesNilClients: nil pointers inside an Env's interfaces are
// refused with an error, not a panic on first use.
func TestRunRefusesNilClients(t *testing.T) {
	ctx := context.Background()
	mem, err := incident.Memory("demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  incident.Env
	}{
		{"nil MemoryCounter", incident.Env{Counter: (*incident.MemoryCounter)(nil), Store: mem.Store, Prefix: "demo"}},
		{"nil *RedisCounter", incident.Env{Counter: (*incident.RedisCounter)(nil), Store: mem.Store, Prefix: "demo"}},
		{"RedisCounter without client", incident.Env{Counter: incident.RedisCounter{}, Store: mem.Store, Prefix: "demo"}},
		{"RedisCounter with a nil client", incident.Env{Counter: incident.RedisCounter{Client: (*redis.Client)(nil)}, Store: mem.Store, Prefix: "demo"}},
		{"*RedisCounter with a nil client", incident.Env{Counter: &incident.RedisCounter{Client: (*redis.Client)(nil)}, Store: mem.Store, Prefix: "demo"}},
		{"nil memstore", incident.Env{Counter: mem.Counter, Store: (*memstore.Store)(nil), Prefix: "demo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := incident.Run(ctx, tc.env, incident.Options{Requests: 2, Gap: time.Millisecond}); !errors.Is(err, incident.ErrInvalidOptions) {
				t.Fatalf("Run: err = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

// dials counts the connections a client dials, and how many it had dialed
// when the first GET (the naive burst's first read) was sent.
type dials struct {
	mu         sync.Mutex
	n          int
	atFirstGet int
	sawGet     bool
}

func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			d.mu.Lock()
			d.n++
			d.mu.Unlock()
		}
		return c, err
	}
}

func (d *dials) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "get" {
			d.mu.Lock()
			if !d.sawGet {
				d.sawGet, d.atFirstGet = true, d.n
			}
			d.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (d *dials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedisPoolWarmed: on Redis the bursts find their connections open. A
// fresh client (the demo's: a pool of 64) has dialed one per request
// before the naive burst's first GET and dials none during either burst.
// An outside walk of the demo, whose fresh pool dialed during the burst,
// saw 4 to 29 of 50 naive requests through, and all 50 with a warm pool.
func TestRedisPoolWarmed(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	const requests = 50
	allThrough := 0
	const runs = 10
	for run := range runs {
		client := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
		d := &dials{}
		client.AddHook(d)
		env, err := incident.Redis(client, fmt.Sprintf("warm-%d-%d", run, time.Now().UnixNano()), rs.Addr)
		if err != nil {
			t.Fatal(err)
		}
		r, err := incident.Run(ctx, env, incident.Options{Requests: requests})
		_ = client.Close()
		if err != nil {
			t.Fatal(err)
		}
		check(t, r)
		d.mu.Lock()
		if !d.sawGet || d.atFirstGet < requests || d.n != d.atFirstGet {
			t.Fatalf("run %d: %d connections dialed before the naive burst, %d in all; want at least %d before and none during the bursts", run+1, d.atFirstGet, d.n, requests)
		}
		d.mu.Unlock()
		if r.Naive.Allowed == requests {
			allThrough++
			break
		}
	}
	// Whether every request reads before any writes is still a race: one
	// run letting all 50 through is the bar (on an idle 2-core machine all
	// did, 20 runs in 20 of the demo; a CI run saw none in 3, so it tries
	// up to ten, stopping at the first).
	if allThrough == 0 {
		t.Fatalf("the naive limiter never let all %d requests through in %d runs on a warm pool", requests, runs)
	}
}
