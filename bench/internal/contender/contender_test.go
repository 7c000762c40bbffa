package contender

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/bench/internal/closedloop"
	"github.com/floodgate-rl/floodgate/bench/internal/redisproc"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

func startRedis(t *testing.T) *redisproc.Server {
	t.Helper()
	redisproc.Require(t)
	s, err := redisproc.Start(context.Background(), redisproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func TestOpenPolicies(t *testing.T) {
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingLog, floodgate.TokenBucket, floodgate.GCRA, floodgate.Quota} {
		p, err := OpenPolicy("open", a)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if p.Algorithm != a {
			t.Errorf("%s: got algorithm %s", a, p.Algorithm)
		}
	}
	if _, err := OpenPolicy("open", 0); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("algorithm 0: err = %v", err)
	}
}

// TestNilDependencies checks that no adapter accepts a nil client.
func TestNilDependencies(t *testing.T) {
	p, _ := OpenPolicy("open", floodgate.GCRA)
	var nilRedis *redis.Client
	for name, f := range map[string]func() error{
		"floodgate": func() error { _, err := Floodgate(nil, p); return err },
		"layered":   func() error { _, err := Layered(nil, floodgate.SlidingWindow); return err },
		"redisrate": func() error { _, err := RedisRate(nil); return err },
		"ulule":     func() error { _, err := Ulule(nilRedis, "x"); return err },
		"throttled": func() error { _, err := Throttled(nilRedis, "x"); return err },
		"tiny":      func() error { _, _, err := Tiny(context.Background(), nil); return err },
		"rueidis":   func() error { _, err := RueidisTiny(nil); return err },
	} {
		if err := f(); !errors.Is(err, ErrNilDependency) {
			t.Errorf("%s: err = %v, want ErrNilDependency", name, err)
		}
	}
}

// TestFloodgateOpReportsDenials checks the adapter's mapping of a
// decision: with a limit of 3, the fourth call on a key is a denial.
func TestFloodgateOpReportsDenials(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := floodgate.NewFixedWindow("three", 3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	op, err := Floodgate(l, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Floodgate(l, floodgate.Policy{Name: "bad"}); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("invalid policy: err = %v", err)
	}
	for i, want := range []bool{true, true, true, false} {
		got, err := op(context.Background(), "k")
		if err != nil || got != want {
			t.Errorf("call %d: %v, %v; want %v", i+1, got, err, want)
		}
	}
}

// TestRedisContenders runs every Redis adapter against a real server:
// each allows every call under its open limit, from several goroutines,
// and really writes to Redis.
func TestRedisContenders(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	c := srv.Client(8)
	t.Cleanup(func() { c.Close() })
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ap.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)

	limiterOn := func(client redisstore.Client, prefix string) *floodgate.Limiter {
		st, err := redisstore.New(client, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := floodgate.New(st, floodgate.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	type named struct {
		name string
		op   func() (closedloop.Op, error)
	}
	var cases []named
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingLog, floodgate.TokenBucket, floodgate.GCRA, floodgate.Quota} {
		for cname, client := range map[string]redisstore.Client{"plain": c, "ap": ap} {
			cases = append(cases, named{fmt.Sprintf("floodgate-%s-%s", a, cname), func() (closedloop.Op, error) {
				p, err := OpenPolicy("open", a)
				if err != nil {
					return nil, err
				}
				return Floodgate(limiterOn(client, "t-"+a.String()+"-"+cname), p)
			}})
		}
	}
	cases = append(cases,
		named{"layered", func() (closedloop.Op, error) { return Layered(limiterOn(ap, "t-layered"), floodgate.SlidingWindow) }},
		named{"redis_rate", func() (closedloop.Op, error) { return RedisRate(c) }},
		named{"redis_rate-ap", func() (closedloop.Op, error) { return RedisRate(ap) }},
		named{"ulule", func() (closedloop.Op, error) { return Ulule(c, "t-ulule") }},
		named{"throttled", func() (closedloop.Op, error) { return Throttled(c, "t-throttled:") }},
		named{"tiny", func() (closedloop.Op, error) { op, _, err := Tiny(ctx, c); return op, err }},
		named{"tiny-ap", func() (closedloop.Op, error) { op, _, err := Tiny(ctx, ap); return op, err }},
		named{"rueidis", func() (closedloop.Op, error) { return RueidisTiny(rc) }},
	)
	keys := make([]string, 20)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op, err := tc.op()
			if err != nil {
				t.Fatal(err)
			}
			for i := range keys {
				keys[i] = fmt.Sprintf("%s.k%d", tc.name, i)
			}
			before := commandsProcessed(t, c)
			st, err := closedloop.Run(ctx, closedloop.Config{Workers: 8, Duration: 100 * time.Millisecond, Keys: keys}, op)
			if err != nil {
				t.Fatal(err)
			}
			if st.Allowed == 0 || st.Denied != 0 || st.Errors != 0 {
				t.Errorf("allowed %d denied %d errors %d (first error %v): want only allowed", st.Allowed, st.Denied, st.Errors, st.FirstError)
			}
			// Every decision reached the server (open-limit bucket keys expire
			// within milliseconds, so the key count proves nothing).
			if got := commandsProcessed(t, c) - before; got < int64(st.Allowed) {
				t.Errorf("server processed %d commands for %d decisions", got, st.Allowed)
			}
		})
	}
}

func commandsProcessed(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(redisproc.InfoField(info, "total_commands_processed"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRueidisStoreClient runs Floodgate's Redis store over the rueidis
// adapter: decisions agree with the limit (the reply is decoded), the
// script is loaded on first use (NOSCRIPT is recognised), and a bad
// argument type is refused.
func TestRueidisStoreClient(t *testing.T) {
	srv := startRedis(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	if _, err := NewRueidisStoreClient(nil); !errors.Is(err, ErrNilDependency) {
		t.Errorf("nil client: err = %v", err)
	}
	a, err := NewRueidisStoreClient(rc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := redisstore.New(a, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: "rue"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := floodgate.NewSlidingWindow("five", 5, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 7 {
		r, err := l.Allow(ctx, p, "id")
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 5; r.Allowed != want {
			t.Errorf("request %d: allowed %v, want %v", i+1, r.Allowed, want)
		}
		if want := int64(max(4-i, 0)); r.Remaining != want {
			t.Errorf("request %d: remaining %d, want %d", i+1, r.Remaining, want)
		}
	}
	cmd := redis.NewCmd(ctx, "evalsha", "x", "1", struct{}{})
	if err := a.Process(ctx, cmd); err == nil || cmd.Err() == nil {
		t.Error("unsupported argument type: no error")
	}
	cmd = redis.NewCmd(ctx, "evalsha", "0000000000000000000000000000000000000000", "0")
	if err := a.Process(ctx, cmd); !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Errorf("unknown script: err = %v, want a NOSCRIPT reply error", err)
	}
}
