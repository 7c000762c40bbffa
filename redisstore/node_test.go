package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestClusterNodes runs the per-primary coalescing of a *redis.ClusterClient
// (node.go) against a real three-primary Redis Cluster: exact admission
// under concurrency, layered decisions on one primary decided atomically in
// one call, a batch sent on a stale slot map, and decisions made while
// slots move between primaries.
func TestClusterNodes(t *testing.T) {
	t.Parallel() // mostly waits for servers to form
	cl := redistest.StartCluster(t)
	cn := newClusterNodes(t, cl)
	cc := cl.Client(t)
	s, err := New(cc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.nodes == nil || s.batch != nil {
		t.Fatal("a *redis.ClusterClient does not get per-primary coalescing by default")
	}
	if off, err := New(cc, Options{Coalesce: CoalesceOff}); err != nil || off.nodes != nil {
		t.Fatalf("CoalesceOff: %v, per-primary coalescing on: %v", err, off != nil && off.nodes != nil)
	}
	t.Run("admission", func(t *testing.T) { testNodeAdmission(t, cn, s) })
	t.Run("layered on one primary", func(t *testing.T) { testNodeLayered(t, cn, s) })
	t.Run("reservation undo", func(t *testing.T) { testNodeReserveUndo(t, s) })
	t.Run("stale slot map", func(t *testing.T) { testNodeStaleMap(t, cn, s) })
	t.Run("resharding", func(t *testing.T) { testNodeResharding(t, cn, s) })
}

// clusterNodes is a test's handle on the cluster's primaries.
type clusterNodes struct {
	t     *testing.T
	cl    *redistest.Cluster
	nodes []*redis.Client
	ids   []string
}

// newClusterNodes returns the handle on cl's primaries, with the Store's
// scripts loaded on each.
func newClusterNodes(t *testing.T, cl *redistest.Cluster) *clusterNodes {
	t.Helper()
	cn := &clusterNodes{t: t, cl: cl}
	for _, n := range cl.Nodes {
		c := n.Client(t)
		id, err := c.ClusterMyID(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		cn.nodes = append(cn.nodes, c)
		cn.ids = append(cn.ids, id)
	}
	cn.loadScripts(t)
	return cn
}

// owner returns the index of the primary that serves slot, asking the
// primaries themselves.
func (cn *clusterNodes) owner(t *testing.T, slot int) int {
	t.Helper()
	//lint:ignore SA1019 CLUSTER SLOTS is still served by Redis 7 and lists each range's primary first.
	ranges, err := cn.nodes[0].ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		if int(r.Start) <= slot && slot <= int(r.End) {
			for i, a := range cn.cl.Addrs {
				if a == r.Nodes[0].Addr {
					return i
				}
			}
		}
	}
	t.Fatalf("no primary serves slot %d", slot)
	return -1
}

// loadScripts loads the store's scripts on every primary, so that the
// counts of script calls do not include the first calls' NOSCRIPT and EVAL.
func (cn *clusterNodes) loadScripts(t *testing.T) {
	t.Helper()
	srcs := []string{script.Source(), layersScript.Source()}
	for _, sc := range fastScripts {
		if sc != nil {
			srcs = append(srcs, sc.Source())
		}
	}
	for _, sc := range nodeScripts {
		srcs = append(srcs, sc.Source())
	}
	for _, c := range cn.nodes {
		for _, src := range srcs {
			if err := c.ScriptLoad(context.Background(), src).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// evalshaCalls returns the EVALSHA and EVAL calls served so far by every
// primary.
func (cn *clusterNodes) evalshaCalls(t *testing.T) int64 {
	t.Helper()
	var n int64
	for _, c := range cn.nodes {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if rest, ok := strings.CutPrefix(line, cmd); ok {
					v, _, _ := strings.Cut(rest, ",")
					x, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					n += x
				}
			}
		}
	}
	return n
}

// moveSlot moves slot from primary from to primary to the way redis-cli
// --cluster reshard does: IMPORTING on to, MIGRATING on from, MIGRATE of
// its keys in groups, then SETSLOT NODE on every primary. Clients go on
// deciding meanwhile.
func (cn *clusterNodes) moveSlot(t *testing.T, slot, from, to int) {
	t.Helper()
	ctx := context.Background()
	src, dst := cn.nodes[from], cn.nodes[to]
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("moving slot %d from %s to %s: %v", slot, cn.cl.Addrs[from], cn.cl.Addrs[to], err)
		}
	}
	must(dst.Do(ctx, "cluster", "setslot", slot, "importing", cn.ids[from]).Err())
	must(src.Do(ctx, "cluster", "setslot", slot, "migrating", cn.ids[to]).Err())
	host, port, _ := strings.Cut(cn.cl.Addrs[to], ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 50).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	must(dst.Do(ctx, "cluster", "setslot", slot, "node", cn.ids[to]).Err())
	must(src.Do(ctx, "cluster", "setslot", slot, "node", cn.ids[to]).Err())
	for i, c := range cn.nodes {
		if i != from && i != to {
			must(c.Do(ctx, "cluster", "setslot", slot, "node", cn.ids[to]).Err())
		}
	}
}

// testNodeAdmission: many callers, many keys on every primary, each key
// asked more than its limit at one instant: each key admits exactly its
// limit, whatever the batches were, and the calls were coalesced.
func testNodeAdmission(t *testing.T, cn *clusterNodes, s *Store) {
	const keys, perKey, limit = 60, 12, 7
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Quota} {
		t.Run(a.String(), func(t *testing.T) {
			p := floodgate.Policy{Name: "adm", Algorithm: a, Limit: limit, Window: time.Minute}
			if a == floodgate.Quota {
				p = floodgate.Policy{Name: "adm", Algorithm: a, Limit: limit, Calendar: floodgate.Calendar{Unit: floodgate.PeriodDay}}
			}
			p = mustPolicy(t, p)
			prefix := uniquePrefix(t)
			now := time.Now().UnixMicro()
			key := func(i int) string { return algo.KeyAt(prefix, p, fmt.Sprintf("u%d", i), now) }
			var admitted [keys]atomic.Int64
			var failed atomic.Int64
			var first atomic.Value
			before := cn.evalshaCalls(t)
			var wg sync.WaitGroup
			for w := range 64 {
				wg.Go(func() {
					out := make([]floodgate.Result, 1)
					for j := range keys * perKey / 64 {
						i := (w*7 + j*13) % keys
						layers := []floodgate.Layer{{Policy: p, Key: key(i), Cost: 1}}
						if err := s.Decide(context.Background(), now, layers, out); err != nil {
							if failed.Add(1) == 1 {
								first.Store(err.Error())
							}
							continue
						}
						if out[0].Allowed {
							admitted[i].Add(1)
						}
					}
				})
			}
			wg.Wait()
			calls := cn.evalshaCalls(t) - before
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d decisions failed, first: %v", n, first.Load())
			}
			for i := range admitted {
				if got := admitted[i].Load(); got != limit {
					t.Errorf("key %d: %d admitted, want exactly %d", i, got, limit)
				}
			}
			decisions := int64(keys * perKey / 64 * 64)
			t.Logf("%d decisions in %d script calls", decisions, calls)
			if calls >= decisions {
				t.Errorf("%d script calls for %d decisions: nothing was coalesced", calls, decisions)
			}
		})
	}
}

// sameNodeUsers returns n identities whose keys' slot (floodgate.Key puts
// the identity in the hash tag) differs from edgeKey's but is served by
// the same primary.
func sameNodeUsers(t *testing.T, cn *clusterNodes, edgeKey, prefix string, n int) []string {
	t.Helper()
	home := cn.owner(t, Slot(edgeKey))
	slotOwner := map[int]int{}
	var users []string
	for i := 0; len(users) < n; i++ {
		if i > 100_000 {
			t.Fatal("no identities found on the edge key's primary")
		}
		id := fmt.Sprintf("%s-u%d", prefix, i)
		sl := idSlot(id)
		if sl == Slot(edgeKey) {
			continue
		}
		o, ok := slotOwner[sl]
		if !ok {
			o = cn.owner(t, sl)
			slotOwner[sl] = o
		}
		if o == home {
			users = append(users, id)
		}
	}
	return users
}

// idSlot is the slot of every key floodgate.Key makes for identity id.
func idSlot(id string) int {
	return Slot("{" + floodgate.EncodeIdentity(id) + "}")
}

// testNodeLayered: three-layer decisions (a shared edge window, a
// per-user sliding window, a per-user quota) whose keys lie in two slots
// of one primary are decided in one call each (coalesced), all or
// nothing: the edge admits exactly its limit, no user more than its own,
// and every layer's state holds exactly what was admitted.
func testNodeLayered(t *testing.T, cn *clusterNodes, s *Store) {
	const edgeLimit, userLimit, quotaLimit, users, perUser = 60, 5, 1000, 20, 8
	edge := mustPolicy(t, floodgate.Policy{Name: "edge", Algorithm: floodgate.FixedWindow, Limit: edgeLimit, Window: time.Minute})
	user := mustPolicy(t, floodgate.Policy{Name: "user", Algorithm: floodgate.SlidingWindow, Limit: userLimit, Window: time.Minute})
	quota := mustPolicy(t, floodgate.Policy{Name: "quota", Algorithm: floodgate.Quota, Limit: quotaLimit, Calendar: floodgate.Calendar{Unit: floodgate.PeriodMonth}})
	prefix := uniquePrefix(t)
	now := time.Now().UnixMicro()
	edgeKey := floodgate.Key(prefix, edge, "edge")
	ids := sameNodeUsers(t, cn, edgeKey, "id", users)
	layersOf := func(u int, cost int64) []floodgate.Layer {
		return []floodgate.Layer{
			{Policy: edge, Key: edgeKey, Cost: cost},
			{Policy: user, Key: floodgate.Key(prefix, user, ids[u]), Cost: cost},
			{Policy: quota, Key: algo.KeyAt(prefix, quota, ids[u], now), Cost: cost},
		}
	}
	if s.nodes.batcherFor(context.Background(), layersOf(0, 1)) == nil {
		t.Fatal("a decision on one primary is not coalesced")
	}
	var admitted [users]atomic.Int64
	var failed atomic.Int64
	var first atomic.Value
	before := cn.evalshaCalls(t)
	var wg sync.WaitGroup
	for w := range users * perUser {
		wg.Go(func() {
			out := make([]floodgate.Result, 3)
			if err := s.Decide(context.Background(), now, layersOf(w%users, 1), out); err != nil {
				if failed.Add(1) == 1 {
					first.Store(err.Error())
				}
				return
			}
			if out[0].Allowed && out[1].Allowed && out[2].Allowed {
				admitted[w%users].Add(1)
			}
		})
	}
	wg.Wait()
	calls := cn.evalshaCalls(t) - before
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d decisions failed, first: %v", n, first.Load())
	}
	var total int64
	out := make([]floodgate.Result, 3)
	for u := range users {
		a := admitted[u].Load()
		total += a
		if a > userLimit {
			t.Errorf("user %d: %d admitted over a limit of %d", u, a, userLimit)
		}
		if err := s.Decide(context.Background(), now, layersOf(u, 0), out); err != nil {
			t.Fatal(err)
		}
		if out[1].Remaining != userLimit-a || out[2].Remaining != quotaLimit-a {
			t.Errorf("user %d: %d admitted, but its layers hold %d and %d", u, a, userLimit-out[1].Remaining, quotaLimit-out[2].Remaining)
		}
	}
	if total != edgeLimit || out[0].Remaining != 0 {
		t.Errorf("%d admitted, the edge window has %d left; want exactly %d admitted and none left", total, out[0].Remaining, edgeLimit)
	}
	// Every decision was one call (no reservation, no release): at most
	// one call per decision, and fewer when coalesced.
	if calls > users*perUser {
		t.Errorf("%d script calls for %d decisions: split, not decided in one call", calls, users*perUser+users)
	}
	markers, err := cn.nodes[cn.owner(t, Slot(edgeKey))].Keys(context.Background(), prefix+"*:rel:*").Result()
	if err != nil || len(markers) > 0 {
		t.Errorf("release markers %q (%v): a decision was split", markers, err)
	}
	t.Logf("%d decisions in %d script calls; %d admitted; rerouted %d", users*perUser+users, calls, total, s.nodes.rerouted.Load())

	// A lone decision whose keys lie in several slots of one primary goes
	// to the layered script's node variant, packed (decideOnNode): its
	// peek gives what the peeks above gave; with a value floodgate did
	// not write on its user key, the node refuses it and the split path
	// fails it as alone elsewhere, and its other keys are not written.
	ctx := context.Background()
	b := s.nodes.batcherFor(ctx, layersOf(0, 1))
	ls := layersOf(0, 0)
	if oneSlot(ls) {
		t.Fatal("the lone decision's keys share a slot")
	}
	if err := s.decideOnNode(ctx, b.client, now, ls, out); err != nil {
		t.Fatal(err)
	}
	if a := admitted[0].Load(); out[1].Remaining != userLimit-a || out[2].Remaining != quotaLimit-a || out[0].Remaining != 0 {
		t.Errorf("lone on the node: %+v, want %d and %d left on the user's layers", out, userLimit-a, quotaLimit-a)
	}
	node := cn.nodes[cn.owner(t, Slot(edgeKey))]
	kept := map[string]snapshot{}
	for _, l := range ls {
		kept[l.Key] = snap(t, node, l.Key)
	}
	if err := node.Set(ctx, ls[1].Key, "not ours", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	kept[ls[1].Key] = snap(t, node, ls[1].Key)
	ls = layersOf(0, 1)
	if err := s.decideOnNode(ctx, b.client, now, ls, out); err == nil || !strings.Contains(err.Error(), "did not write") {
		t.Errorf("lone on the node, a foreign value: %v, want a value floodgate did not write", err)
	}
	for _, l := range ls {
		untouched(t, node, l.Key, kept[l.Key])
	}
}

// testNodeStaleMap: a batch sent to a primary that no longer serves one
// of its keys' slots decides the others, writes nothing for that key, and
// the decision is made again where the slot now is.
func testNodeStaleMap(t *testing.T, cn *clusterNodes, s *Store) {
	ctx := context.Background()
	p := mustPolicy(t, floodgate.Policy{Name: "stale", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute})
	prefix := uniquePrefix(t)
	now := time.Now().UnixMicro()
	// Two keys of two slots on one primary.
	k1 := floodgate.Key(prefix, p, "a")
	home := cn.owner(t, Slot(k1))
	var k2 string
	for i := 0; k2 == ""; i++ {
		k := floodgate.Key(prefix, p, fmt.Sprintf("b%d", i))
		if Slot(k) != Slot(k1) && cn.owner(t, Slot(k)) == home {
			k2 = k
		}
	}
	l1 := []floodgate.Layer{{Policy: p, Key: k1, Cost: 1}}
	l2 := []floodgate.Layer{{Policy: p, Key: k2, Cost: 1}}
	b := s.nodes.batcherFor(ctx, l1)
	if b == nil || b != s.nodes.batcherFor(ctx, l2) {
		t.Fatal("two keys of one primary have different batchers")
	}
	// Move k1's slot away; the client's slot map still says home.
	to := (home + 1) % len(cn.nodes)
	cn.moveSlot(t, Slot(k1), home, to)
	defer cn.moveSlot(t, Slot(k1), to, home)
	sc := scriptFor(l1)
	c1, c2 := getCall(ctx, now, sc, l1), getCall(ctx, now, sc, l2)
	b.run([]*call{c1, c2})
	<-c1.done
	<-c2.done
	if !c1.retry || c1.err != nil {
		t.Fatalf("the key the primary no longer serves: retry %v, err %v; want a retry", c1.retry, c1.err)
	}
	if c2.retry || c2.err != nil || !c2.res[0].Allowed || c2.res[0].Remaining != 9 {
		t.Fatalf("the key the primary serves: retry %v, err %v, %+v", c2.retry, c2.err, c2.res[0])
	}
	for i, n := range cn.nodes {
		if e, err := n.Exists(ctx, k1).Result(); err != nil && !strings.HasPrefix(err.Error(), "MOVED") || e != 0 {
			t.Fatalf("node %d holds %s (%d, %v): the batch wrote a key it does not serve", i, k1, e, err)
		}
	}
	// Through Decide: the decision is made where the slot now is.
	out := make([]floodgate.Result, 1)
	for want := int64(9); want >= 7; want-- {
		if err := s.Decide(ctx, now, l1, out); err != nil || !out[0].Allowed || out[0].Remaining != want {
			t.Fatalf("Decide after the move: %+v, %v; want admitted with %d left", out[0], err, want)
		}
	}
	if e, err := cn.nodes[to].Exists(ctx, k1).Result(); err != nil || e != 1 {
		t.Fatalf("the new primary does not hold %s (%d, %v)", k1, e, err)
	}
	// A layered decision over both slots, now on two primaries by the
	// slot map the client may still hold: decided, all or nothing.
	lb := []floodgate.Layer{{Policy: p, Key: k1, Cost: 1}, {Policy: p, Key: k2, Cost: 1}}
	o2 := make([]floodgate.Result, 2)
	if err := s.Decide(ctx, now, lb, o2); err != nil || !o2[0].Allowed || o2[0].Remaining != 6 || o2[1].Remaining != 8 {
		t.Fatalf("layered Decide after the move: %+v, %v", o2, err)
	}
	putCall(c1)
	putCall(c2)
}

// testNodeResharding: callers decide, single-layer and layered, while
// slots holding their keys move between primaries and back. No decision
// is indeterminate, none counted twice or lost: every key's state holds
// exactly what was admitted on it.
func testNodeResharding(t *testing.T, cn *clusterNodes, s *Store) {
	ctx := context.Background()
	const limit, users = 1 << 30, 24
	one := mustPolicy(t, floodgate.Policy{Name: "rs", Algorithm: floodgate.FixedWindow, Limit: limit, Window: time.Hour})
	edge := mustPolicy(t, floodgate.Policy{Name: "rse", Algorithm: floodgate.FixedWindow, Limit: limit, Window: time.Hour})
	tight := mustPolicy(t, floodgate.Policy{Name: "rst", Algorithm: floodgate.SlidingWindow, Limit: 40, Window: time.Hour})
	prefix := uniquePrefix(t)
	now := time.Now().UnixMicro()
	edgeKey := floodgate.Key(prefix, edge, "edge")
	ids := sameNodeUsers(t, cn, edgeKey, "rs", users)
	var admittedOne, admittedTight [users]atomic.Int64
	var admittedLayered atomic.Int64
	var unavailable, decisions atomic.Int64
	var bad atomic.Value
	reroutedBefore := s.nodes.rerouted.Load()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 48 {
		wg.Go(func() {
			out := make([]floodgate.Result, 2)
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				u := (w + j) % users
				var layers []floodgate.Layer
				switch j % 3 {
				case 0:
					layers = []floodgate.Layer{{Policy: one, Key: floodgate.Key(prefix, one, ids[u]), Cost: 1}}
				case 1:
					layers = []floodgate.Layer{{Policy: tight, Key: floodgate.Key(prefix, tight, ids[u]), Cost: 1}}
				default:
					layers = []floodgate.Layer{{Policy: edge, Key: edgeKey, Cost: 1}, {Policy: one, Key: floodgate.Key(prefix+"l", one, ids[u]), Cost: 1}}
				}
				err := s.Decide(ctx, now, layers, out[:len(layers)])
				decisions.Add(1)
				switch {
				case errors.Is(err, floodgate.ErrStoreUnavailable):
					unavailable.Add(1) // nothing written: allowed by the contract
					continue
				case err != nil:
					bad.CompareAndSwap(nil, err.Error())
					continue
				}
				if !allAllowed(out[:len(layers)]) {
					continue
				}
				switch j % 3 {
				case 0:
					admittedOne[u].Add(1)
				case 1:
					admittedTight[u].Add(1)
				default:
					admittedLayered.Add(1)
				}
			}
		})
	}
	// Move the slots of a third of the users and of the edge key away
	// and back, one after another.
	var slots []int
	seen := map[int]bool{}
	for u := 0; u < users; u += 3 {
		if sl := idSlot(ids[u]); !seen[sl] {
			seen[sl] = true
			slots = append(slots, sl)
		}
	}
	slots = append(slots, Slot(edgeKey))
	moves := 0
	for round := range 2 {
		for _, sl := range slots {
			from := cn.owner(t, sl)
			to := (from + 1 + round) % len(cn.nodes)
			time.Sleep(20 * time.Millisecond)
			cn.moveSlot(t, sl, from, to)
			time.Sleep(20 * time.Millisecond)
			cn.moveSlot(t, sl, to, from)
			moves += 2
		}
	}
	close(stop)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatalf("a decision failed other than with ErrStoreUnavailable: %v", v)
	}
	// Every key holds exactly what was admitted on it.
	out := make([]floodgate.Result, 2)
	for u := range users {
		l := []floodgate.Layer{{Policy: one, Key: floodgate.Key(prefix, one, ids[u])}}
		if err := s.Decide(ctx, now, l, out[:1]); err != nil {
			t.Fatal(err)
		}
		if got, want := limit-out[0].Remaining, admittedOne[u].Load(); got != want {
			t.Errorf("user %d: the window holds %d, %d were admitted", u, got, want)
		}
		l = []floodgate.Layer{{Policy: tight, Key: floodgate.Key(prefix, tight, ids[u])}}
		if err := s.Decide(ctx, now, l, out[:1]); err != nil {
			t.Fatal(err)
		}
		if got, want := tight.Limit-out[0].Remaining, admittedTight[u].Load(); got != want || want > tight.Limit {
			t.Errorf("user %d: the tight window holds %d, %d were admitted (limit %d)", u, got, want, tight.Limit)
		}
	}
	l := []floodgate.Layer{{Policy: edge, Key: edgeKey}}
	if err := s.Decide(ctx, now, l, out[:1]); err != nil {
		t.Fatal(err)
	}
	if got, want := limit-out[0].Remaining, admittedLayered.Load(); got != want {
		t.Errorf("the edge window holds %d, %d layered decisions were admitted", got, want)
	}
	t.Logf("%d decisions during %d slot moves: %d unavailable (nothing written), %d rerouted from a node's batch", decisions.Load(), moves, unavailable.Load(), s.nodes.rerouted.Load()-reroutedBefore)
}

// testNodeReserveUndo: a window or quota part reserved through a primary's
// batcher (reserveOnNode) gets the same results and the same release
// numbers as the general script's reservation (Store.reserve), step after
// step on two keys with the same history: fresh, in the same window, in
// the next one (a sliding window's previous window), and later.
func testNodeReserveUndo(t *testing.T, s *Store) {
	ctx := context.Background()
	for _, p := range []floodgate.Policy{
		{Name: "ufw", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Second},
		{Name: "usw", Algorithm: floodgate.SlidingWindow, Limit: 5, Window: time.Second},
		{Name: "uqt", Algorithm: floodgate.Quota, Limit: 5, Calendar: floodgate.Calendar{Unit: floodgate.PeriodDay}},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			p = mustPolicy(t, p)
			prefix := uniquePrefix(t)
			now := time.Now().UnixMicro()
			for step, dt := range []int64{0, 1, 250_000, 1_100_000, 1_200_000, 2_700_000, 2_700_001, 9_000_000} {
				at := now + dt
				mk := func(id string) *part {
					l := []floodgate.Layer{{Policy: p, Key: algo.KeyAt(prefix, p, id, at), Cost: 2}}
					return &part{slot: Slot(l[0].Key), layers: l}
				}
				general, node := mk("general"), mk("node")
				s.reserve(ctx, at, general)
				if !s.reserveOnNode(ctx, at, node) {
					t.Fatal("reserveOnNode did not take a window part")
				}
				if general.err != nil || node.err != nil {
					t.Fatalf("step %d: %v, %v", step, general.err, node.err)
				}
				if general.out[0] != node.out[0] || general.held != node.held {
					t.Fatalf("step %d: general %+v held %v, node %+v held %v", step, general.out[0], general.held, node.out[0], node.held)
				}
				if general.held && general.undo[0][0] != node.undo[0][0] {
					t.Fatalf("step %d: release start %d by the general script, %d derived", step, general.undo[0][0], node.undo[0][0])
				}
			}
		})
	}
}
