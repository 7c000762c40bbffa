// Package clusterslots keeps a go-redis ClusterClient from taking its slot
// map from a node that has left the cluster.
//
// go-redis reloads its slot map from one node picked at random among those
// it knows (CLUSTER SLOTS), and keeps the answer whatever it is. A node
// removed with redis-cli --cluster del-node is reset (CLUSTER RESET SOFT)
// and, if left running, answers as a one-node cluster serving no slot; the
// client knows it for up to a minute more (until it forgets the nodes
// absent from its maps), and every reload that picked it replaced the map
// with an empty one: commands went to random nodes (CLUSTERDOWN Hash slot
// not served from the removed one), and listings of the primaries found
// none, until a later reload picked a node still in the cluster.
//
// NewClusterClient's client refuses, on each of its node connections, a
// CLUSTER SLOTS answer (but those asked under Unguarded) that assigns no
// slot, and one that assigns fewer
// slots than the last answer taken, so that go-redis asks the next node
// instead (it tries each known node in turn, and keeps the map it has when
// none answers). A smaller map is taken when three answers in a row say
// so: the cluster itself then serves fewer slots (an operator unassigned
// some), rather than one node lagging or gone.
//
// The guard also reads every CLUSTER SLOTS answer itself: a node that
// announces no endpoint (cluster-preferred-endpoint-type unknown-endpoint,
// a NULL where its address goes) made go-redis's parser fail with a bare
// "redis: nil"; it now fails with ErrNoEndpoint, which says what to set.
//
// (go-redis's ClusterOptions.ClusterSlots, a slot map source of one's own,
// would do it too, but the client renames every loopback address such a
// source returns to ":port", so that a cluster on 127.0.0.1 would be known
// by other names.)
package clusterslots

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// partialStreak is how many answers assigning fewer slots than the last
// one taken, in a row, make the smaller map taken.
const partialStreak = 3

// ErrRefused is the error a refused CLUSTER SLOTS answer is replaced by.
var ErrRefused = errors.New("clusterslots: slot map refused")

// NewClusterClient returns redis.NewClusterClient(o) with a Guard on every
// node connection it makes.
func NewClusterClient(o *redis.ClusterOptions) *redis.ClusterClient {
	cc := redis.NewClusterClient(o)
	g := &Guard{}
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(g) })
	return cc
}

// Guard is a go-redis hook that refuses CLUSTER SLOTS answers that would
// shrink the slot map (see the package comment). One Guard serves all the
// node clients of one ClusterClient.
type Guard struct {
	mu      sync.Mutex
	covered int // slots the last answer taken assigns
	smaller int // answers in a row assigning fewer
}

// Check judges a CLUSTER SLOTS answer assigning n slots, and returns nil
// when it is to be taken.
func (g *Guard) Check(n int) error {
	if n == 0 {
		return fmt.Errorf("%w: the node serves no slot and knows no node that does (not, or no longer, part of a cluster)", ErrRefused)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if n < g.covered {
		g.smaller++
		if g.smaller < partialStreak {
			return fmt.Errorf("%w: it assigns %d slots, the map in use %d", ErrRefused, n, g.covered)
		}
	}
	g.covered, g.smaller = n, 0
	return nil
}

// DialHook is the next hook's.
func (g *Guard) DialHook(next redis.DialHook) redis.DialHook { return next }

// unguarded is the context key of Unguarded.
type unguarded struct{}

// Unguarded returns ctx under which a CLUSTER SLOTS answer is passed on as
// the node gave it, and not counted: for callers that read the map
// themselves (floodgate doctor reports each node's).
func Unguarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, unguarded{}, true)
}

// ProcessHook reads CLUSTER SLOTS answers itself (askSlots: a node with
// no endpoint fails with ErrNoEndpoint) and checks them, and passes other
// commands on.
func (g *Guard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sc, ok := cmd.(*redis.ClusterSlotsCmd)
		if !ok {
			return next(ctx, cmd)
		}
		err := askSlots(ctx, next, sc)
		if err != nil || ctx.Value(unguarded{}) != nil {
			return err
		}
		if err := g.Check(Covered(sc.Val())); err != nil {
			sc.SetErr(err)
			return err
		}
		return nil
	}
}

// ProcessPipelineHook is the next hook's: go-redis loads its map with a
// plain command.
func (g *Guard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Covered returns how many slots a CLUSTER SLOTS answer assigns to a node.
func Covered(slots []redis.ClusterSlot) int {
	n := 0
	for _, r := range slots {
		if len(r.Nodes) == 0 || r.End < r.Start {
			continue
		}
		n += r.End - r.Start + 1
	}
	return n
}

// Primaries lists the primaries of cc's slot map. ForEachMaster reloads
// the map first, from a node of go-redis's choosing, and a stalled node
// chosen there would take all of ctx's time: the listing gets a third of
// it (a second without a deadline), falling back to the map cached. It
// fails when the map names no primary.
func Primaries(ctx context.Context, cc *redis.ClusterClient) ([]*redis.Client, error) {
	budget := time.Second
	if d, ok := ctx.Deadline(); ok {
		budget = time.Until(d) / 3
	}
	lctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var mu sync.Mutex
	var nodes []*redis.Client
	err := cc.ForEachMaster(lctx, func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	})
	if len(nodes) == 0 {
		if err == nil {
			err = errors.New("no primary in the slot map")
		}
		return nil, fmt.Errorf("redis cluster: %w", err)
	}
	return nodes, nil
}
