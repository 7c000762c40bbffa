package doctor_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestLatencyStalledRedis: an outside walk ran doctor against a Redis
// blocked 90% of the time (DEBUG SLEEP 0.5 in a loop, 50 ms apart): the
// probe's calls, made back to back in a millisecond, all fell between two
// stalls, and the latency check passed with p99 52µs while LATENCY LATEST
// held a 500 ms event. The calls are now spread over the probe's window,
// so that they meet the stalls, and a recent latency event above the
// thresholds fails the check, named.
func TestLatencyStalledRedis(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "local")
	admin := srv.Client(t)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := admin.Do(ctx, "DEBUG", "SLEEP", "0.5").Err(); err != nil {
				t.Errorf("DEBUG SLEEP: %v", err)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	run := func() doctor.Check {
		rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "stall",
			LatencyWarn: 10 * time.Millisecond, LatencyFail: 50 * time.Millisecond, LatencySamples: 10})
		c, ok := rep.Find(doctor.GroupRedis, "latency")
		if !ok {
			t.Fatalf("no latency check:\n%s", text(rep))
		}
		if c.Status == doctor.Pass {
			t.Fatalf("latency passes on a Redis stalled 90%% of the time:\n%s", text(rep))
		}
		return c
	}

	// The latency monitor off (the default): only the probe sees the
	// stalls, and the check says that Redis records none.
	c := run()
	if all := strings.Join(c.Evidence, "\n"); !strings.Contains(all, "latency monitor is off (latency-monitor-threshold 0)") {
		t.Errorf("the evidence does not say the latency monitor is off:\n%s", all)
	}

	// With the monitor on, Redis's own events judge the check too, named.
	if err := admin.ConfigSet(ctx, "latency-monitor-threshold", "100").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "DEBUG", "SLEEP", "0.2").Err(); err != nil { // one event at least before the run
		t.Fatal(err)
	}
	c = run()
	if c.Status != doctor.Fail || !strings.Contains(c.Summary, "Redis recorded a latency event") || !strings.Contains(c.Summary, "command took") {
		t.Fatalf("latency check %v: %q, want a fail naming the latency event", c.Status, c.Summary)
	}
	if !strings.Contains(c.Fix, "LATENCY HISTORY command") {
		t.Errorf("fix %q", c.Fix)
	}
}
