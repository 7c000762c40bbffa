package redisbench

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/bench/internal/redisproc"
)

const sample = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"EVALSHA 2ff4 1 key:__rand_int__ 60","273224.03","2.825","0.400","2.983","4.119","4.975","5.687"
`

func TestParse(t *testing.T) {
	r, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	if r.PerSecond != 273224.03 || r.P50 != 2983*time.Microsecond || r.P99 != 4975*time.Microsecond {
		t.Errorf("got %+v", r)
	}
	if r.Command != "EVALSHA 2ff4 1 key:__rand_int__ 60" {
		t.Errorf("command %q", r.Command)
	}
	for _, bad := range []string{"", `"test","rps"` + "\n", `"test","rps","p50_latency_ms","p99_latency_ms"` + "\n" + `"x","fast","1","2"` + "\n"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

func TestArgs(t *testing.T) {
	args, err := Options{Port: 7000, Requests: 10, Pipeline: 16, RandomKeys: 100}.Args("PING")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-h", "127.0.0.1", "-p", "7000", "-n", "10", "-P", "16", "-c", "50", "-r", "100", "--csv", "PING"}
	if !slices.Equal(args, want) {
		t.Errorf("args = %q, want %q", args, want)
	}
	for name, o := range map[string]Options{
		"shared port": {Port: 6379, Requests: 1},
		"no port":     {Requests: 1},
		"requests":    {Port: 7000},
		"negative":    {Port: 7000, Requests: 1, Pipeline: -1},
	} {
		if _, err := o.Args("PING"); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if _, err := (Options{Port: 7000, Requests: 1}).Args(); !errors.Is(err, ErrConfig) {
		t.Errorf("no command: err = %v", err)
	}
}

func TestRunAgainstServer(t *testing.T) {
	redisproc.Require(t, "redis-server", "redis-benchmark")
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c := srv.Client(1)
	t.Cleanup(func() { c.Close() })
	r, err := Run(ctx, Options{Port: srv.Port, Requests: 2000, Pipeline: 4, Clients: 4, RandomKeys: 50}, "INCR", "rb:__rand_int__")
	if err != nil {
		t.Fatal(err)
	}
	if r.PerSecond <= 0 {
		t.Errorf("rps %v", r.PerSecond)
	}
	// Every request really ran, on keys drawn from the random range.
	keys, err := c.Keys(ctx, "rb:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 || len(keys) > 50 {
		t.Errorf("%d keys, want 1..50", len(keys))
	}
	var sum int64
	for _, k := range keys {
		n, err := c.Get(ctx, k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	if sum != 2000 {
		t.Errorf("counters sum to %d, want 2000", sum)
	}
}

// A command whose argument holds a NUL byte is refused before anything
// runs: redis-benchmark would send it cut at the NUL.
func TestBinaryArgumentRefused(t *testing.T) {
	o := Options{Port: 7000, Requests: 1}
	if _, err := o.Args("EVALSHA", "abc", "1", "k", "a\x00b"); !errors.Is(err, ErrBinaryArgument) {
		t.Fatalf("err %v, want ErrBinaryArgument", err)
	}
	if _, err := o.Args("EVALSHA", "abc", "1", "k", "ab"); err != nil {
		t.Fatal(err)
	}
}
