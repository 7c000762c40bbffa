package redisinfo

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/bench/internal/redisproc"
)

func TestParse(t *testing.T) {
	cpu := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.0\r\n"
	cmds := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=250,usec_per_call=25.00,rejected_calls=1,failed_calls=2\r\ncmdstat_incr:calls=3,usec=6,usec_per_call=2.00\r\n"
	s, err := Parse(cpu, cmds)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUSeconds != 3.75 {
		t.Errorf("CPUSeconds = %v, want 3.75 (children excluded)", s.CPUSeconds)
	}
	if got, want := s.Commands["evalsha"], (CommandStat{Calls: 10, Usec: 250, Failed: 3}); got != want {
		t.Errorf("evalsha = %+v, want %+v", got, want)
	}
	later, err := Parse(strings.ReplaceAll(cpu, "2.250000", "3.250000"), strings.ReplaceAll(cmds, "calls=10,usec=250", "calls=30,usec=850"))
	if err != nil {
		t.Fatal(err)
	}
	c := Diff(s, later, "evalsha")
	if c.Calls != 20 || c.Usec != 600 || c.Failed != 0 || math.Abs(c.CPUSeconds-1) > 1e-9 {
		t.Errorf("diff = %+v", c)
	}
	if got := c.UsecPerCall(); got != 30 {
		t.Errorf("UsecPerCall = %v", got)
	}
	if both := Diff(s, later, "evalsha", "incr", "missing"); both.Calls != 20 || both.Usec != 600 {
		t.Errorf("diff over several commands = %+v (incr unchanged, missing absent)", both)
	}
	if got := c.CPUPerOp(1000); math.Abs(got-1000) > 1e-6 {
		t.Errorf("CPUPerOp = %v µs", got)
	}
	if (Cost{}).CPUPerOp(0) != 0 || (Cost{}).UsecPerCall() != 0 {
		t.Error("zero cost not zero")
	}
	if _, err := Parse("# CPU\r\n", cmds); !errors.Is(err, ErrBadInfo) {
		t.Errorf("missing cpu fields: err = %v", err)
	}
}

func TestAgainstServer(t *testing.T) {
	redisproc.Require(t)
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c := srv.Client(2)
	t.Cleanup(func() { c.Close() })

	before, err := Take(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := c.Incr(ctx, "redisinfo:n").Err(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := Take(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := Diff(before, after, "incr").Calls; got != 5 {
		t.Errorf("incr calls = %d, want 5", got)
	}
	// A failing command is counted as failed.
	if err := c.Set(ctx, "redisinfo:str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Incr(ctx, "redisinfo:str").Err(); err == nil {
		t.Fatal("INCR of a non-number succeeded")
	}
	final, err := Take(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(after, final, "incr"); d.Calls != 1 || d.Failed != 1 {
		t.Errorf("failing INCR: %+v, want 1 call, 1 failed", d)
	}
	if err := c.Set(ctx, "redisinfo:s", strings.Repeat("x", 1000), 0).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := MemoryUsage(ctx, c, "redisinfo:s")
	if err != nil {
		t.Fatal(err)
	}
	if n < 1000 || n > 2000 {
		t.Errorf("MEMORY USAGE of a 1000-byte string = %d", n)
	}
	both, err := MemoryUsage(ctx, c, "redisinfo:s", "redisinfo:n")
	if err != nil {
		t.Fatal(err)
	}
	if both <= n {
		t.Errorf("two keys %d ≤ one key %d", both, n)
	}
	if _, err := MemoryUsage(ctx, c, "redisinfo:missing"); err == nil {
		t.Error("missing key: no error")
	}
	v, err := ServerVersion(ctx, c)
	if err != nil || v == "" {
		t.Errorf("ServerVersion = %q, %v", v, err)
	}
}
