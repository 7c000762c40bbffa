package redisstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// Environment of the helper processes TestProcesses starts.
const (
	envHelper = "FLOODGATE_REDISSTORE_HELPER" // "1" in a helper process
	envAddr   = "FLOODGATE_REDISSTORE_ADDR"   // the private Redis
	envPrefix = "FLOODGATE_REDISSTORE_PREFIX" // key prefix
	envStart  = "FLOODGATE_REDISSTORE_START"  // Unix ns at which to fire
)

const (
	processes       = 4
	requestsPerProc = 100
	processLimit    = 250
	processStep     = 200 * time.Millisecond // between algorithms
)

// processPolicies are the policies TestProcesses races on, one per
// algorithm, 250 per hour.
func processPolicies(t testing.TB) []floodgate.Policy {
	return allAlgorithms(t, processLimit, time.Hour)
}

// TestProcesses runs 4 OS processes (this test binary re-executed as
// TestHelperProcess), each firing 100 concurrent requests at the same
// instant against one key per algorithm with limit 250: exactly 250 must be
// allowed in total, whatever the interleaving across processes.
func TestProcesses(t *testing.T) {
	t.Parallel() // mostly waits on other processes
	e, srv := newEnv(t)
	start := time.Now().Add(2 * time.Second).UnixNano()
	outs := make([]bytes.Buffer, processes)
	var wg sync.WaitGroup
	errs := make([]error, processes)
	for i := range processes {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envHelper+"=1", envAddr+"="+srv.Addr, envPrefix+"="+e.prefix,
			envStart+"="+strconv.FormatInt(start, 10))
		cmd.Stdout = &outs[i]
		cmd.Stderr = &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = cmd.Wait() })
	}
	wg.Wait()
	total := map[string]int{}
	perProc := map[string][]int{}
	for i := range processes {
		if errs[i] != nil {
			t.Fatalf("helper process %d: %v\n%s", i, errs[i], outs[i].String())
		}
		sc := bufio.NewScanner(&outs[i])
		for sc.Scan() {
			name, n, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "allowed "), "=")
			if !ok || !strings.HasPrefix(sc.Text(), "allowed ") {
				continue
			}
			v, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("helper process %d: bad line %q", i, sc.Text())
			}
			total[name] += v
			perProc[name] = append(perProc[name], v)
		}
	}
	for _, p := range processPolicies(t) {
		got := total[p.Algorithm.String()]
		t.Logf("%s: allowed per process %v", p.Algorithm, perProc[p.Algorithm.String()])
		if got != processLimit {
			t.Errorf("%s: %d processes × %d requests allowed %d in total, want exactly %d", p.Algorithm, processes, requestsPerProc, got, processLimit)
		}
		// Record the key for the TTL audit.
		if _, err := e.one(context.Background(), vectors.T0.UnixMicro(), p, e.key(p, "shared"), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHelperProcess is one process of TestProcesses; run on its own it does
// nothing. It prints one "allowed ALGORITHM=N" line per algorithm.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(envHelper) != "1" {
		t.Skip("helper process of TestProcesses")
	}
	c := redis.NewClient(&redis.Options{Addr: os.Getenv(envAddr), ContextTimeoutEnabled: true, PoolSize: requestsPerProc})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	startNs, err := strconv.ParseInt(os.Getenv(envStart), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Warm the connection pool so the processes really overlap.
	for range 10 {
		c.Ping(ctx)
	}
	now := vectors.T0.UnixMicro()
	for i, p := range processPolicies(t) {
		key := floodgate.Key(os.Getenv(envPrefix), p, "shared")
		var allowed atomic.Int64
		var wg sync.WaitGroup
		fire := make(chan struct{})
		for range requestsPerProc {
			wg.Go(func() {
				layers := []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}
				out := make([]floodgate.Result, 1)
				<-fire
				if err := s.Decide(ctx, now, layers, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed {
					allowed.Add(1)
				}
			})
		}
		// Every process fires algorithm i at the same instant.
		time.Sleep(time.Until(time.Unix(0, startNs).Add(time.Duration(i) * processStep)))
		close(fire)
		wg.Wait()
		fmt.Printf("allowed %s=%d\n", p.Algorithm, allowed.Load())
	}
}
