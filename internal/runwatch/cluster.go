package runwatch

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// shard is what a check saw of one Cluster primary's slot set: the
// primary's address and process, the replicas CLUSTER SLOTS listed with
// it, and when.
type shard struct {
	primary  string
	server   Server
	replicas []string
	at       time.Time
}

// layout is one check's CLUSTER SLOTS, by primary address.
type layout map[string]place

// place is where a primary stands in a layout: the slot set it serves
// ("slots 0-99,200-300", its ranges sorted) and the replicas listed for
// them.
type place struct {
	slots    string
	replicas []string
}

// checkCluster observes each primary of cc at now: by its address, and
// by the slots it serves (CLUSTER SLOTS), as observePrimary says. After
// a check every primary answered, it forgets the slot sets no primary
// serves any more and the addresses not seen for forgetAfter.
func (w *Watch) checkCluster(ctx context.Context, cc *redis.ClusterClient, now time.Time) error {
	// CLUSTER SLOTS, deprecated for CLUSTER SHARDS since Redis 7.0, is
	// what go-redis builds its node addresses from: the addresses here
	// are the ones ForEachMaster's clients have.
	//lint:ignore SA1019 the addresses must be go-redis's own (see above)
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return fmt.Errorf("runwatch: CLUSTER SLOTS: %w", err)
	}
	lay := layoutOf(slots)
	err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		s, err := info(ctx, n)
		if err != nil {
			return err
		}
		addr := n.Options().Addr
		promoted := false
		if w.slotsMoved(addr, lay[addr]) {
			if promoted, err = wasReplica(ctx, n); err != nil {
				return err
			}
		}
		if c, ok := w.observePrimary(now, addr, lay[addr], s, promoted); ok {
			w.report(withPersistence(ctx, n, c))
		}
		return nil
	})
	if err == nil {
		w.prune(now, lay)
	}
	return err
}

// slotsMoved reports whether p's slot set was served, at the previous
// check, by a primary at another address than addr.
func (w *Watch) slotsMoved(addr string, p place) bool {
	if p.slots == "" {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	before, had := w.shards[p.slots]
	return had && before.primary != addr
}

// wasReplica asks a primary for INFO replication and reports whether it
// was a replica promoted since it started: a master_replid2 other than
// all zeros (the replication ID of the primary it followed). CLUSTER
// SLOTS does not list a replica until the other nodes know its
// replication offset, seconds after it joined, so the layout alone may
// not tell a failover.
func wasReplica(ctx context.Context, n Client) (bool, error) {
	r, err := replicationOf(ctx, n)
	return r.promoted(), err
}

// layoutOf reads CLUSTER SLOTS: each primary's slot set and replicas.
func layoutOf(slots []redis.ClusterSlot) layout {
	ranges, replicas := map[string][]string{}, map[string][]string{}
	for _, sl := range slots {
		if len(sl.Nodes) == 0 {
			continue
		}
		a := sl.Nodes[0].Addr
		ranges[a] = append(ranges[a], strconv.Itoa(sl.Start)+"-"+strconv.Itoa(sl.End))
		for _, r := range sl.Nodes[1:] {
			if !slices.Contains(replicas[a], r.Addr) {
				replicas[a] = append(replicas[a], r.Addr)
			}
		}
	}
	lay := layout{}
	for a, r := range ranges {
		slices.Sort(r)
		lay[a] = place{slots: "slots " + strings.Join(r, ","), replicas: replicas[a]}
	}
	return lay
}

// observePrimary records s as the primary at addr serving p's slots at
// now (promoted: from replica, see wasReplica), and returns the change
// it is, if any:
//   - a process other than the one last seen at addr: a failover when it
//     was promoted (a node restarted as replica, then promoted), a
//     restart otherwise;
//   - else, p's slot set served at the previous check by a primary at
//     another address: a failover or a replacement, unless the slots
//     moved (see handover).
//
// The first server seen at an address, serving a slot set not seen
// before (or slots unknown: p.slots ""), is no change.
func (w *Watch) observePrimary(now time.Time, addr string, p place, s Server, promoted bool) (Change, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, known := w.nodes[addr]
	w.nodes[addr] = sighting{server: s, slots: p.slots, at: now}
	before, had := w.shards[p.slots]
	if p.slots != "" {
		w.shards[p.slots] = shard{primary: addr, server: s, replicas: p.replicas, at: now}
	}
	switch {
	case known && replaced(prev.server, s):
		kind := KindRestart
		if promoted {
			kind = KindFailover
		}
		return Change{Node: addr, Addr: addr, Kind: kind, From: prev.server, To: s}, true
	case p.slots == "" || !had || before.primary == addr:
		return Change{}, false
	}
	kind, changed := handover(before, addr, arrival{
		promoted:   promoted,
		seenBefore: known,
		wasPrimary: known && prev.slots != "" && !prev.at.Before(before.at),
	}, s, now)
	if !changed {
		return Change{}, false
	}
	return Change{Node: addr, Addr: addr, Kind: kind, From: before.server, To: s}, true
}

// arrival is what the Watch knows of the process now serving a slot set
// another address served at the previous check, whose process is the
// one last seen at its address (or the first seen there).
type arrival struct {
	// promoted: INFO replication names a master_replid2 (see
	// wasReplica). A replica promoted at any time since it started
	// keeps it, however long ago.
	promoted bool
	// seenBefore: the process was seen at its address before, as a
	// primary serving slots or not.
	seenBefore bool
	// wasPrimary: the process was seen serving slots (CLUSTER SLOTS
	// listed it as a primary) at the previous check that saw the slot
	// set, or since.
	wasPrimary bool
}

// handover tells how the slot set before's primary served came to be
// served by s at addr (another address; a: what is known of s) at now:
// by a failover or a replacement, which keep only what was replicated
// or loaded, or by a resharding, which MIGRATEs every key (changed
// false):
//   - s was a primary serving slots at the previous check: a primary
//     already, not just promoted, whose slots moved, even with a
//     master_replid2 (promoted long ago);
//   - s was promoted, or addr was listed as a replica of those slots: a
//     failover;
//   - s is the process seen at addr before: a primary seen before, its
//     slots moved;
//   - s has been up since before the previous check (its uptime is
//     longer than the time since): an existing primary, one that served
//     no slot, moved;
//   - else, a server started since: a replacement.
//
// The old owner listed as s's replica is no evidence: with
// cluster-allow-replica-migration yes (Redis's default), a primary
// resharded of its last slot becomes a replica of the primary that took
// it, as a primary failed over does of its promoted replica.
func handover(before shard, addr string, a arrival, s Server, now time.Time) (kind Kind, changed bool) {
	switch {
	case a.wasPrimary:
		return 0, false
	case a.promoted || slices.Contains(before.replicas, addr):
		return KindFailover, true
	case a.seenBefore || s.Uptime > now.Sub(before.at):
		return 0, false
	}
	return KindReplaced, true
}

// prune forgets, after a check every primary of lay answered at now,
// the slot sets no primary serves any more and the addresses no check
// has seen for forgetAfter, so that the Watch does not grow with every
// layout and address the Cluster has had.
func (w *Watch) prune(now time.Time, lay layout) {
	current := make(map[string]bool, len(lay))
	for _, p := range lay {
		current[p.slots] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.shards {
		if !current[k] {
			delete(w.shards, k)
		}
	}
	for a, sg := range w.nodes {
		if now.Sub(sg.at) > forgetAfter {
			delete(w.nodes, a)
		}
	}
}
