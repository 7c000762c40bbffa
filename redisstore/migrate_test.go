package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestClusterSplitDuringMigration: layered decisions split over primaries
// (user, team, org, global, each in its own slot), every one denied by the
// exhausted team layer, go on while org's slot is moved by hand, step by
// step, as an operator (or a slow reshard) does: IMPORTING on the target,
// MIGRATING on the source, org's keys still on the source for a while,
// then MIGRATE of those keys, and only later SETSLOT NODE. Every reserve of
// org's part that committed must be given back, or the decision must say
// that it may not have been (ErrIndeterminate): a denied request consumes
// nothing, so org's layers hold at most what indeterminate decisions may
// have kept, and nothing at all when none was.
//
// A release names its marker and journals, new keys of the migrating slot:
// Redis 7.0 answers TRYAGAIN on the source while it holds org's keys, ASK
// then TRYAGAIN on the target once MIGRATE moved them, until SETSLOT NODE.
// Before the fix, luascript sent it again until the caller's deadline, and
// the decision returned a plain denial with org's reservation kept: org
// counted every denied request.
func TestClusterSplitDuringMigration(t *testing.T) {
	t.Parallel() // mostly waits for servers to form
	cl := redistest.StartCluster(t)
	cn := newClusterNodes(t, cl)
	cc := cl.Client(t)
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"coalesced", Options{}},
		{"coalescing off", Options{Coalesce: CoalesceOff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(cc, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			testSplitDuringMigration(t, cn, s)
		})
	}
}

func testSplitDuringMigration(t *testing.T, cn *clusterNodes, s *Store) {
	ctx := context.Background()
	const (
		wide     = 1_000_000
		teamCap  = 5
		workers  = 4
		budget   = 50 * time.Millisecond // serve's fallback budget
		stepWait = 700 * time.Millisecond
	)
	prefix := uniquePrefix(t)
	now := time.Now().UnixMicro() // one instant: no window ends, no bucket refills
	user := mustPolicy(t, floodgate.Policy{Name: "user", Algorithm: floodgate.FixedWindow, Limit: wide, Window: time.Hour})
	team := mustPolicy(t, floodgate.Policy{Name: "team", Algorithm: floodgate.FixedWindow, Limit: teamCap, Window: time.Hour})
	global := mustPolicy(t, floodgate.Policy{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 1 << 40, Window: time.Hour})
	// Org has a fixed window (reserved through its primary's queue when
	// the Store coalesces) and a token bucket (reserved by the general
	// script, released with its journal), in one slot.
	orgFW := mustPolicy(t, floodgate.Policy{Name: "orgfw", Algorithm: floodgate.FixedWindow, Limit: wide, Window: time.Hour})
	// A day's refill interval: the bucket's key lives (in real time) far
	// longer than the test, which decides at one instant.
	orgTB := mustPolicy(t, floodgate.Policy{Name: "orgtb", Algorithm: floodgate.TokenBucket, Limit: 10_000, Window: 24 * time.Hour})
	orgFWQ := mustPolicy(t, floodgate.Policy{Name: "orgq", Algorithm: floodgate.Quota, Limit: wide, Calendar: floodgate.Calendar{Unit: floodgate.PeriodDay}})

	// Identities: org's slot on one primary, team's and user's on
	// another, global's on any, all four slots distinct.
	pick := func(name string, ok func(slot int) bool) string {
		for i := range 100_000 {
			id := fmt.Sprintf("%s%d", name, i)
			if ok(idSlot(id)) {
				return id
			}
		}
		t.Fatalf("no identity for %s", name)
		return ""
	}
	org := pick("org", func(int) bool { return true })
	orgSlot := idSlot(org)
	from := cn.owner(t, orgSlot)
	to := (from + 1) % len(cn.nodes)
	other := (from + 2) % len(cn.nodes)
	teamID := pick("team", func(sl int) bool { return sl != orgSlot && cn.owner(t, sl) == other })
	userID := pick("user", func(sl int) bool {
		return sl != orgSlot && sl != idSlot(teamID) && cn.owner(t, sl) == other
	})
	globalID := pick("global", func(sl int) bool {
		return sl != orgSlot && sl != idSlot(teamID) && sl != idSlot(userID)
	})
	layer := func(p floodgate.Policy, id string) floodgate.Layer {
		return floodgate.Layer{Policy: p, Key: floodgate.Key(prefix, p, id), Cost: 1}
	}
	orgs := []floodgate.Layer{layer(orgFW, org), layer(orgTB, org), layer(orgFWQ, org)}
	for _, l := range orgs {
		if Slot(l.Key) != orgSlot {
			t.Fatalf("org key %s is not in slot %d", l.Key, orgSlot)
		}
	}
	standing := func(l floodgate.Layer) int64 {
		t.Helper()
		l.Cost = 0
		out := make([]floodgate.Result, 1)
		if err := s.Decide(ctx, now, []floodgate.Layer{l}, out); err != nil {
			t.Fatal(err)
		}
		return l.Policy.Limit - out[0].Remaining
	}
	// Exhaust team; give every org layer a state, so that org's keys are
	// on the source when the slot starts migrating.
	out := make([]floodgate.Result, 1)
	for range teamCap {
		if err := s.Decide(ctx, now, []floodgate.Layer{layer(team, teamID)}, out); err != nil || !out[0].Allowed {
			t.Fatalf("exhausting team: %v, %+v", err, out[0])
		}
	}
	for _, l := range orgs {
		if err := s.Decide(ctx, now, []floodgate.Layer{l}, out); err != nil || !out[0].Allowed {
			t.Fatalf("org %s: %v, %+v", l.Key, err, out[0])
		}
	}
	var decisions, allowed, indeterminate, unavailable, slow atomic.Int64
	var bad atomic.Value
	phase := atomic.Int32{}
	var perPhase [4]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			out := make([]floodgate.Result, 4)
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				layers := []floodgate.Layer{layer(user, userID), layer(team, teamID), orgs[(w+j)%len(orgs)], layer(global, globalID)}
				dctx, cancel := context.WithTimeout(ctx, budget)
				start := time.Now()
				err := s.Decide(dctx, now, layers, out)
				took := time.Since(start)
				cancel()
				decisions.Add(1)
				perPhase[phase.Load()].Add(1)
				switch {
				case errors.Is(err, floodgate.ErrIndeterminate):
					indeterminate.Add(1)
				case errors.Is(err, floodgate.ErrStoreUnavailable):
					unavailable.Add(1)
				case err != nil:
					bad.CompareAndSwap(nil, err.Error())
				case allAllowed(out):
					allowed.Add(1)
				case out[1].Allowed:
					bad.CompareAndSwap(nil, fmt.Sprintf("a denial not by the exhausted team layer: %+v", out))
				case err == nil && took >= budget:
					slow.Add(1) // a plain denial that used the whole budget
				}
			}
		})
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("moving slot %d: %v", orgSlot, err)
		}
	}
	src, dst := cn.nodes[from], cn.nodes[to]
	time.Sleep(stepWait / 2)
	phase.Store(1) // migrating, org's keys on the source
	must(dst.Do(ctx, "cluster", "setslot", orgSlot, "importing", cn.ids[from]).Err())
	must(src.Do(ctx, "cluster", "setslot", orgSlot, "migrating", cn.ids[to]).Err())
	time.Sleep(stepWait)
	phase.Store(2) // migrating, org's keys on the target
	host, port, _ := strings.Cut(cn.cl.Addrs[to], ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, orgSlot, 100).Result()
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
	time.Sleep(stepWait)
	phase.Store(3) // moved
	must(dst.Do(ctx, "cluster", "setslot", orgSlot, "node", cn.ids[to]).Err())
	must(src.Do(ctx, "cluster", "setslot", orgSlot, "node", cn.ids[to]).Err())
	must(cn.nodes[other].Do(ctx, "cluster", "setslot", orgSlot, "node", cn.ids[to]).Err())
	time.Sleep(stepWait / 2)
	close(stop)
	wg.Wait()

	if v := bad.Load(); v != nil {
		t.Fatalf("a decision failed with neither ErrIndeterminate nor ErrStoreUnavailable, or was wrong: %v", v)
	}
	for i := range perPhase {
		if perPhase[i].Load() == 0 {
			t.Fatalf("no decision in phase %d of the move", i)
		}
	}
	if n := allowed.Load(); n != 0 {
		t.Fatalf("%d decisions admitted past the exhausted team layer", n)
	}
	// A denied decision consumes nothing: every org layer holds only its
	// setup request, plus at most what indeterminate decisions may have
	// kept, and what the denials whose release did not finish within the
	// budget kept: such a denial answers the denial, standings counting
	// the reservation (see Store.release), rather than an error that
	// would send the caller to a failure mode that may admit. Those took
	// the whole budget (slow); on an idle machine there are none (a CI
	// run under load saw 9, and org layers keeping 8).
	kept := int64(0)
	for _, l := range orgs {
		got := standing(l) - 1
		kept += got
		if got < 0 || got > indeterminate.Load()+slow.Load() {
			t.Errorf("org layer %s holds %d requests of denied decisions; %d decisions were indeterminate, %d unavailable, %d plain denials took the whole %v budget, of %d",
				l.Policy.Name, got, indeterminate.Load(), unavailable.Load(), slow.Load(), budget, decisions.Load())
		}
	}
	if got := standing(layer(user, userID)); got > indeterminate.Load()+slow.Load() {
		t.Errorf("user holds %d requests of denied decisions; %d were indeterminate", got, indeterminate.Load())
	}
	t.Logf("%d decisions (by phase %v), %d indeterminate, %d unavailable, %d slow plain denials; org layers kept %d",
		decisions.Load(), []int64{perPhase[0].Load(), perPhase[1].Load(), perPhase[2].Load(), perPhase[3].Load()},
		indeterminate.Load(), unavailable.Load(), slow.Load(), kept)
}

// TestSlidingLogWhileSlotMigrates: a sliding log whose set would empty
// during a script, on the source node of a slot being migrated. Redis
// deletes an emptied set, and a script that then touches the key again is
// refused there ("non local key"), after what it already wrote stays
// written. Two ways it happened: a decision that trimmed a log holding
// only expired entries before adding its own (the other layer of the
// decision was counted, and the call reported as failed), and a split
// decision's release of a reservation that was the log's only entry (the
// release failed half done, the other layers kept their reservation).
// Now a decision adds before it trims, and a release that empties the log
// does not read it again.
func TestSlidingLogWhileSlotMigrates(t *testing.T) {
	cl := redistest.StartCluster(t)
	cn := newClusterNodes(t, cl)
	s, err := New(cl.Client(t), Options{Coalesce: CoalesceOff})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prefix := uniquePrefix(t)
	fw := mustPolicy(t, floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour})
	sl := mustPolicy(t, floodgate.Policy{Name: "sl", Algorithm: floodgate.SlidingLog, Limit: 1000, Window: time.Second})
	layers := []floodgate.Layer{
		{Policy: fw, Key: floodgate.Key(prefix, fw, "x"), Cost: 1},
		{Policy: sl, Key: floodgate.Key(prefix, sl, "x"), Cost: 1},
	}
	slot := Slot(layers[0].Key)
	from := cn.owner(t, slot)
	to := (from + 1) % len(cn.nodes)
	src, dst := cn.nodes[from], cn.nodes[to]
	count := func() int64 {
		t.Helper()
		n, err := src.Get(ctx, layers[0].Key).Int64()
		if err != nil {
			// the fixed window's state is binary: read its standing instead
			out := make([]floodgate.Result, 1)
			peek := []floodgate.Layer{layers[0]}
			peek[0].Cost = 0
			if err := s.Decide(ctx, time.Now().UnixMicro(), peek, out); err != nil {
				t.Fatal(err)
			}
			return fw.Limit - out[0].Remaining
		}
		return n
	}
	now := time.Now().UnixMicro()
	out := make([]floodgate.Result, 2)
	// A first decision, 10 s ago: the log's entry has expired since.
	if err := s.Decide(ctx, now-10_000_000, layers, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("first decision: %v, %+v", err, out)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "cluster", "setslot", slot, "importing", cn.ids[from]).Err())
	must(src.Do(ctx, "cluster", "setslot", slot, "migrating", cn.ids[to]).Err())
	t.Cleanup(func() {
		for _, n := range cn.nodes {
			_ = n.Do(context.Background(), "cluster", "setslot", slot, "node", cn.ids[from]).Err()
		}
	})

	// The decision trims the log's only (expired) entry.
	if err := s.Decide(ctx, now, layers, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("decision on the migrating slot, the log holding only an expired entry: %v, %+v", err, out)
	}
	if n := src.ZCard(ctx, layers[1].Key).Val(); n != 1 {
		t.Fatalf("the log holds %d entries after the decision, want 1", n)
	}
	if c := count(); c != 2 {
		t.Fatalf("the fixed window counts %d, want 2", c)
	}

	// A split decision's reservation, 5 s later: the log's entry of the
	// decision above has expired, the reservation is its only entry.
	later := now + 5_000_000
	p := part{slot: slot, layers: append([]floodgate.Layer(nil), layers...)}
	s.reserve(ctx, later, &p)
	if p.err != nil || !p.held {
		t.Fatalf("reserve: %v, held %v, %+v", p.err, p.held, p.out)
	}
	if c := count(); c != 3 {
		t.Fatalf("the fixed window counts %d after the reservation, want 3", c)
	}
	applied, _ := s.release(ctx, later, &p, 0xfeed)
	if p.relErr != nil || !applied {
		t.Fatalf("release of the log's only entry on the migrating slot: applied %v, %v", applied, p.relErr)
	}
	if c := count(); c != 2 {
		t.Fatalf("the fixed window counts %d after the release, want 2 (the reservation given back)", c)
	}
	if n := src.Exists(ctx, layers[1].Key).Val(); n != 0 {
		t.Fatalf("the log still exists after its only entry was released")
	}
	if r := p.out[1]; !r.Allowed || r.Remaining != sl.Limit {
		t.Fatalf("the emptied log's standing %+v, want all %d remaining", r, sl.Limit)
	}
}
