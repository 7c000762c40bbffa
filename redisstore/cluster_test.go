package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
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

// TestCluster runs the suite against a real three-primary Redis Cluster:
// the vectors of every algorithm and of quotas, the concurrency proof, the
// differential tests, layered decisions with their layers in one slot and
// split over several, releases, and the fan-in proof. Every script call
// goes through a slotRecorder, which checks that its keys hash to one slot
// (no CROSSSLOT is possible); the cluster would refuse the call otherwise.
func TestCluster(t *testing.T) {
	t.Parallel() // mostly waits for servers to form
	cl := redistest.StartCluster(t)
	var nodes []*redis.Client
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Client(t))
	}
	cc := cl.Client(t)
	if s, err := New(cc, Options{}); err != nil || !s.slots {
		t.Fatalf("SlotCheckAuto did not detect the cluster client: %v", err)
	}
	rec := &slotRecorder{Client: cc}
	e := newEnvOn(t, rec, nodes, Options{SlotCheck: SlotCheckOn})
	e.rd = cc
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())

	t.Run("keyslot", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 200 {
			key := fmt.Sprintf("k%d-%x", i, r.Uint64())
			switch i % 4 {
			case 1:
				key = floodgate.Key("fg", fixed10(t), key)
			case 2:
				key = "a{" + key + "}b{c}"
			case 3:
				key = "{}" + key
			}
			want, err := nodes[0].ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := Slot(key); got != int(want) {
				t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
			}
		}
	})
	t.Run("vectors", func(t *testing.T) {
		vectors.RunCases(t, append(vectors.All(), vectors.Calendar()...), "cluster-"+e.prefix, e.decider())
	})
	t.Run("concurrent", func(t *testing.T) { testConcurrent(t, e, 20) })
	t.Run("differential", func(t *testing.T) { testDifferential(t, e, seed) })
	t.Run("layers one slot", func(t *testing.T) { testLayersAllOrNothing(t, e, true) })
	t.Run("layers peek and many", func(t *testing.T) { testLayersPeekAndMany(t, e) })
	t.Run("denied standing", func(t *testing.T) { testDeniedStanding(t, e) })
	t.Run("layers split", func(t *testing.T) { testSplitAllOrNothing(t, e) })
	t.Run("split differential", func(t *testing.T) { testSplitDifferential(t, e, seed) })
	t.Run("release", func(t *testing.T) { testRelease(t, e) })
	t.Run("fan-in", func(t *testing.T) { testFanIn(t, e, allLayered...) })
	t.Run("no coalescing across slots", func(t *testing.T) { testNoCoalescingAcrossSlots(t, cc) })

	calls, bad := rec.report()
	for _, b := range bad {
		t.Errorf("a script call's keys span slots: %s", b)
	}
	if calls < 10_000 {
		t.Errorf("the recorder saw %d script calls: it is not in the path", calls)
	}
	t.Logf("%d script calls, each with its keys in one slot", calls)
}

// slotRecorder is a Client that passes every command on, and checks, for
// every EVAL and EVALSHA, that all its keys hash to one slot.
type slotRecorder struct {
	Client
	mu    sync.Mutex
	calls int
	bad   []string
}

// Process records cmd and sends it.
func (r *slotRecorder) Process(ctx context.Context, cmd redis.Cmder) error {
	r.record(cmd.Args())
	return r.Client.Process(ctx, cmd)
}

func (r *slotRecorder) record(args []any) {
	if len(args) < 3 {
		return
	}
	if name := strings.ToLower(argString(args[0])); name != "eval" && name != "evalsha" {
		return
	}
	n, err := strconv.Atoi(argString(args[2]))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if err != nil || n < 0 || 3+n > len(args) {
		r.bad = append(r.bad, fmt.Sprintf("numkeys %q of %d arguments", argString(args[2]), len(args)))
		return
	}
	keys := args[3 : 3+n]
	for _, k := range keys[min(1, n):] {
		if Slot(argString(k)) != Slot(argString(keys[0])) {
			var ks []string
			for _, k := range keys {
				ks = append(ks, fmt.Sprintf("%s (slot %d)", argString(k), Slot(argString(k))))
			}
			r.bad = append(r.bad, strings.Join(ks, ", "))
			return
		}
	}
}

// report returns the number of script calls seen and the offending ones.
func (r *slotRecorder) report() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, append([]string(nil), r.bad...)
}

// argString returns a command argument as go-redis sends it.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case *string:
		return *v
	}
	return fmt.Sprint(a)
}

// TestSlotRecorder checks that the recorder TestCluster relies on does
// catch a script call whose keys span slots.
func TestSlotRecorder(t *testing.T) {
	var r slotRecorder
	a, b := "fg:x:fw:{ralice}", "fg:x:fw:{rbob}"
	if Slot(a) == Slot(b) {
		t.Fatal("test keys share a slot")
	}
	c := "fg:y:sw:{ralice}"
	r.record([]any{"evalsha", "sha", "2", &a, &c, "1"})
	if _, bad := r.report(); len(bad) != 0 {
		t.Fatalf("one-slot call reported: %v", bad)
	}
	r.record([]any{"evalsha", "sha", "2", &a, &b, "1"})
	r.record([]any{"get", a})
	if calls, bad := r.report(); calls != 2 || len(bad) != 1 {
		t.Fatalf("calls %d, reported %v; want 2 calls and the cross-slot one reported", calls, bad)
	}
}

// testNoCoalescingAcrossSlots: clients that may send keys to several nodes
// do not coalesce by default, so concurrent single-layer decisions of many
// identities all succeed: a cluster client with the slot check off, and a
// cluster client's AutoPipeliner.
func testNoCoalescingAcrossSlots(t *testing.T, cc *redis.ClusterClient) {
	ap, err := cc.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	p := mustPolicy(t, floodgate.Policy{Name: "spread", Algorithm: floodgate.SlidingWindow, Limit: 10, Window: time.Minute})
	for name, c := range map[string]struct {
		client Client
		opts   Options
	}{
		"cluster client, slot check off": {cc, Options{SlotCheck: SlotCheckOff}},
		"cluster AutoPipeliner":          {ap, Options{}},
	} {
		s, err := New(c.client, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if s.batch != nil {
			t.Fatalf("%s: coalescing on", name)
		}
		prefix := uniquePrefix(t)
		now := time.Now().UnixMicro()
		var wg sync.WaitGroup
		var failed atomic.Int64
		var first atomic.Value
		for w := range 64 {
			wg.Go(func() {
				for i := range 10 {
					layers := []floodgate.Layer{{Policy: p, Key: floodgate.Key(prefix, p, fmt.Sprintf("w%d-%d", w, i)), Cost: 1}}
					out := make([]floodgate.Result, 1)
					if err := s.Decide(context.Background(), now, layers, out); err != nil {
						if failed.Add(1) == 1 {
							first.Store(err.Error())
						}
					}
				}
			})
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Errorf("%s: %d of 640 decisions failed, first: %v", name, n, first.Load())
		}
		// The keys expire with their TTL (a minute plus slack).
	}
}
