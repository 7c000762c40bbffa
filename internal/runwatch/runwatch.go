// Package runwatch tells when the Redis server a client talks to has
// become another server process: the run_id of its INFO server section
// changed (or, for a server that reports none, its uptime went
// backwards). A Redis restarted without persistence comes back empty:
// every counter, quota and lease is gone, and its clients see only a
// short outage. A Sentinel failover changes the primary's run_id too,
// and so does a Redis replaced behind the same address: from the
// client's side, these cannot be told from a restart.
package runwatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server identifies one Redis server process, from INFO server.
type Server struct {
	// RunID is the server's run_id: random, new at every start.
	RunID string
	// Uptime is how long the server has been running (uptime_in_seconds,
	// in whole seconds).
	Uptime time.Duration
}

// ErrNoIdentity reports an INFO server reply with neither run_id nor
// uptime_in_seconds.
var ErrNoIdentity = errors.New("runwatch: INFO server reply has no run_id or uptime_in_seconds")

// Parse reads run_id and uptime_in_seconds from an INFO server reply.
// It fails, wrapping ErrNoIdentity, when the reply has neither, and on an
// uptime that is not a number of seconds.
func Parse(info string) (Server, error) {
	var s Server
	found := false
	for line := range strings.SplitSeq(info, "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch key {
		case "run_id":
			s.RunID, found = value, true
		case "uptime_in_seconds":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 || n > int64(time.Duration(1<<63-1)/time.Second) {
				return Server{}, fmt.Errorf("runwatch: INFO server uptime_in_seconds %q: not a number of seconds", value)
			}
			s.Uptime, found = time.Duration(n)*time.Second, true
		}
	}
	if !found {
		return Server{}, ErrNoIdentity
	}
	return s, nil
}

// Change is a server process found in place of another one.
type Change struct {
	// Node is the address of the Cluster node, "" for a single Redis
	// (or the primary of a Sentinel group).
	Node string
	// From and To are the server seen before and the one seen now.
	From, To Server
}

// Watch remembers the server process last seen per node and reports
// when another one is seen in its place. The zero value is not usable:
// call New. Safe for concurrent use.
type Watch struct {
	onChange func(Change)
	changes  atomic.Int64

	mu   sync.Mutex
	seen map[string]Server // node -> the server last seen there
}

// New returns a Watch that calls onChange (if not nil) at every change,
// from the goroutine that observed it, with no lock held.
func New(onChange func(Change)) *Watch {
	return &Watch{onChange: onChange, seen: map[string]Server{}}
}

// Changes returns how many changes the Watch has seen.
func (w *Watch) Changes() int64 { return w.changes.Load() }

// Observe records s as the server now at node and reports whether it is
// another process than the one seen there before: a run_id that
// differs, or, when the server reports no run_id, an uptime that went
// backwards. The first server seen at a node is no change.
func (w *Watch) Observe(node string, s Server) bool {
	return w.observe(node, node, s)
}

// observe is Observe of a server found under key (a node's address, or
// the slots a Cluster primary serves), reported as node.
func (w *Watch) observe(key, node string, s Server) bool {
	w.mu.Lock()
	prev, known := w.seen[key]
	w.seen[key] = s
	w.mu.Unlock()
	if !known {
		return false
	}
	changed := s.RunID != prev.RunID
	if s.RunID == "" && prev.RunID == "" {
		changed = s.Uptime < prev.Uptime
	}
	if !changed {
		return false
	}
	w.changes.Add(1)
	if w.onChange != nil {
		w.onChange(Change{Node: node, From: prev, To: s})
	}
	return true
}

// Client is what Check sends INFO through: *redis.Client, the failover
// clients and *redis.ClusterClient satisfy it.
type Client interface {
	Info(ctx context.Context, section ...string) *redis.StringCmd
}

// Check asks the server behind client for INFO server and observes it:
// a single Redis (or a Sentinel group's primary, through a failover
// client) as node "", each primary of a Redis Cluster
// (*redis.ClusterClient) by the slots it serves (CLUSTER SLOTS), so that
// a replica promoted in its place, at another address, is a change, and
// reported with its address. A primary whose slots changed (a
// resharding) is a first sighting. It returns the first error met; a
// Cluster's nodes that answered are observed all the same.
func (w *Watch) Check(ctx context.Context, client Client) error {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return w.check(ctx, client, "", "")
	}
	// CLUSTER SLOTS, deprecated for CLUSTER SHARDS since Redis 7.0, is
	// what go-redis builds its node addresses from: the addresses here
	// are the ones ForEachMaster's clients have.
	//lint:ignore SA1019 the addresses must be go-redis's own (see above)
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return fmt.Errorf("runwatch: CLUSTER SLOTS: %w", err)
	}
	ranges := map[string][]string{} // primary address -> its slot ranges
	for _, sl := range slots {
		if len(sl.Nodes) > 0 {
			a := sl.Nodes[0].Addr
			ranges[a] = append(ranges[a], strconv.Itoa(sl.Start)+"-"+strconv.Itoa(sl.End))
		}
	}
	keyOf, keys := map[string]string{}, map[string]bool{} // primary address -> its key
	for a, r := range ranges {
		slices.Sort(r)
		keyOf[a] = "slots " + strings.Join(r, ",")
		keys[keyOf[a]] = true
	}
	err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		addr := n.Options().Addr
		key, ok := keyOf[addr]
		if !ok {
			key = addr
		}
		return w.check(ctx, n, key, addr)
	})
	if err == nil {
		// Forget what no primary serves any more (slots moved,
		// addresses gone), so that the Watch does not grow with every
		// layout the Cluster has had.
		w.mu.Lock()
		for k := range w.seen {
			if strings.HasPrefix(k, "slots ") && !keys[k] {
				delete(w.seen, k)
			}
		}
		w.mu.Unlock()
	}
	return err
}

func (w *Watch) check(ctx context.Context, client Client, key, node string) error {
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("runwatch: INFO server: %w", err)
	}
	s, err := Parse(info)
	if err != nil {
		return err
	}
	w.observe(key, node, s)
	return nil
}
