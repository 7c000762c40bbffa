package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// Admission of layered decisions split over Redis Cluster slots: a shared
// (edge) layer on one global key plus a per-user layer for a few users,
// hundreds of concurrent requests at one instant. No layer may ever admit
// more than its limit, and the decisions must use at least
// admissionFloor of the binding capacity (the most the layers allow
// together), on a cold store (new client, scripts flushed from every node)
// and a warm one.
const (
	admissionUsers    = 3
	admissionUserCap  = 30
	admissionRequests = 400
	// admissionFloor is the fraction of the binding capacity every run must
	// admit: the target of 95 % (the ordered split admits all of
	// it in every run measured; see docs/layered.md).
	admissionFloor = 0.95
)

// TestClusterAdmission runs, on a real three-primary cluster, for every
// algorithm (used by both layers) and three edge limits — 50 (the edge
// binds), 90 (both bind at once) and 1,000 (the per-user layers bind) —
// two cold and three warm runs (the last spread over 400 Stores, one
// request each, as over many processes) of 400 concurrent requests from
// three users, and checks each run: never over any limit, every layer counts
// exactly what was admitted, at least 95 % of the binding capacity
// admitted, and no key left without a TTL.
func TestClusterAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t)
	var nodes []*redis.Client
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Client(t))
	}
	warm := newEnvOn(t, cl.Client(t), nodes, Options{})
	const cold, warmRuns = 2, 3
	var report []string
	for a := floodgate.FixedWindow; a <= floodgate.Quota; a++ {
		for _, edge := range []int64{50, 90, 1000} {
			name := fmt.Sprintf("%s/edge-%d", a, edge)
			t.Run(name, func(t *testing.T) {
				bind := min(edge, admissionUsers*admissionUserCap)
				var got []string
				worst, surplus := int64(bind), int64(0)
				for run := range cold + warmRuns {
					e := warm
					kind := "warm"
					if run < cold {
						kind = "cold"
						// A new client (no connection, no slot map) and
						// no script cached on any node: the first calls
						// meet NOSCRIPT.
						for _, n := range nodes {
							if err := n.ScriptFlush(context.Background()).Err(); err != nil {
								t.Fatal(err)
							}
						}
						e = newEnvOn(t, cl.Client(t), nodes, Options{})
					} else if run == cold {
						admissionRun(t, e, a, edge, 1, "warmup") // connections and scripts ready
					}
					// The last warm run spreads the requests over as many
					// Stores as requests, as over many processes: no Store
					// sees another's decisions in flight.
					spread := 1
					if run == cold+warmRuns-1 {
						spread, kind = admissionRequests, "spread"
					}
					n, extra := admissionRun(t, e, a, edge, spread, fmt.Sprintf("r%d", run))
					worst = min(worst, n)
					surplus += extra
					got = append(got, fmt.Sprintf("%s %d", kind, n))
					if float64(n) < admissionFloor*float64(bind) {
						t.Errorf("%s run %d: %d of %d admitted (%.0f %%), want at least %.0f %%", kind, run, n, bind, 100*float64(n)/float64(bind), 100*admissionFloor)
					}
				}
				t.Logf("admitted of %d: %s", bind, strings.Join(got, ", "))
				line := fmt.Sprintf("%-26s binding %4d: %s (worst %.0f %%)", name, bind, strings.Join(got, ", "), 100*float64(worst)/float64(bind))
				if surplus > 0 {
					line += fmt.Sprintf("; layers counted %d more than admitted", surplus)
				}
				report = append(report, line)
			})
		}
	}
	t.Logf("admission on a 3-primary cluster, %d concurrent requests, %d users × %d:\n%s", admissionRequests, admissionUsers, admissionUserCap, strings.Join(report, "\n"))
}

// admissionRun fires admissionRequests concurrent layered decisions (a
// per-user layer of admissionUserCap and a global edge layer of edge, both
// of algorithm a, the users' keys in other slots than the edge's) at one
// instant and returns how many were admitted, after checking that no
// layer admitted above its limit, that every layer counts exactly what
// was admitted (any surplus is also returned, for the report), and that
// no key is left without a TTL.
func admissionRun(t *testing.T, e *env, a floodgate.Algorithm, edge int64, spread int, tag string) (admitted, surplus int64) {
	t.Helper()
	stores := []*Store{e.store}
	for len(stores) < spread {
		s, err := New(e.client, e.opts)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	user := layered(t, fmt.Sprintf("adm-user%d", edge), a, admissionUserCap)
	global := layered(t, fmt.Sprintf("adm-edge%d", edge), a, edge)
	// The decisions' clock runs with the wall clock from a fixed instant,
	// as a live load's would: requests are decided at slightly different
	// microseconds, so a bucket's refund meets time that has moved on.
	now := vectors.T0.Add(13 * time.Hour).UnixMicro()
	began := time.Now()
	clock := func() int64 { return now + time.Since(began).Microseconds() }
	gl := e.layerAt(global, "global-"+tag, now, 1)
	var uls [admissionUsers]floodgate.Layer
	for u := range uls {
		for i := 0; ; i++ {
			uls[u] = e.layerAt(user, fmt.Sprintf("%s-u%d-%d", tag, u, i), now, 1)
			if Slot(uls[u].Key) != Slot(gl.Key) {
				break
			}
		}
	}
	var byUser [admissionUsers]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, admissionRequests)
	for i := range admissionRequests {
		u := i % admissionUsers
		wg.Go(func() {
			<-start
			out := make([]floodgate.Result, 2)
			err := stores[i%len(stores)].Decide(ctx, clock(), []floodgate.Layer{gl, uls[u]}, out)
			if err != nil {
				errs <- err
				return
			}
			if floodgate.NewDecision(out).Allowed {
				byUser[u].Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.bound[gl.Key] = ttlBound(global)
	for _, l := range uls {
		e.bound[l.Key] = ttlBound(user)
	}
	e.mu.Unlock()
	// Read the layers at the end: the runs last well under the time a
	// bucket takes to refill one unit (two minutes), so what a layer holds
	// is what it admitted.
	end := clock()
	if end-now > time.Minute.Microseconds() {
		t.Fatalf("%s: the run took %v; the counts below assume less than a minute", tag, time.Duration(end-now)*time.Microsecond)
	}
	// Every layer, buckets included, counts exactly what it admitted: less
	// would mean a release gave back what was admitted (over-admission),
	// more that a release fell short (crossed releases on a bucket key did,
	// before the release journals; see docs/layered.md).
	var total int64
	count := func(what string, got, held int64) {
		if held != got {
			t.Errorf("%s: %s: %d admitted, its layer counts %d", tag, what, got, held)
		}
		if held > got {
			surplus += held - got
		}
	}
	for u := range uls {
		got := byUser[u].Load()
		count(fmt.Sprintf("user %d", u), got, admissionUserCap-e.peek(t, end, uls[u]).Remaining)
		if got > admissionUserCap {
			t.Errorf("%s: user %d: %d admitted, over the per-user limit %d", tag, u, got, admissionUserCap)
		}
		total += got
	}
	count("edge", total, edge-e.peek(t, end, gl).Remaining)
	if total > edge {
		t.Errorf("%s: %d admitted, over the edge limit %d", tag, total, edge)
	}
	e.noImmortalKeys(t)
	return total, surplus
}
