// Package runwatch tells when the Redis server a client talks to has
// become another server process: the run_id of its INFO server section
// changed (or, for a server that reports none, its uptime went
// backwards). A Redis restarted without persistence comes back empty:
// every counter, quota and lease is gone, and its clients see only a
// short outage. A Sentinel failover changes the primary's run_id too,
// and so does a Redis replaced behind the same address: from the
// client's side, these cannot be told from a restart.
//
// In a Redis Cluster, a primary is known both by its address and by the
// slots it serves. A new run_id at an address is a change; so is a slot
// set now served at another address by a replica promoted (a failover:
// the replica CLUSTER SLOTS listed for it, a primary whose old owner it
// now lists as replica, or one whose INFO replication names a
// master_replid2) or by a server started since the previous check (a
// replacement). A slot set moved whole to another primary whose process
// is the one seen before, or to an empty primary up since before the
// previous check (a resharding: MIGRATE keeps every key), is no change.
package runwatch

import (
	"context"
	"errors"
	"fmt"
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

// forgetAfter is how long a Watch remembers a node no check has seen:
// the addresses a Cluster's primaries once had are forgotten, so that a
// Watch does not grow with every address ever seen. A node seen again
// after it is a first sighting.
const forgetAfter = 10 * time.Minute

// sighting is a server process seen at a node, and when.
type sighting struct {
	server Server
	at     time.Time
}

// Watch remembers the server process last seen per node (and, in a
// Redis Cluster, per slot set) and reports when another one is seen in
// its place. The zero value is not usable: call New. Safe for concurrent
// use.
type Watch struct {
	onChange func(Change)
	changes  atomic.Int64

	mu     sync.Mutex
	nodes  map[string]sighting // node -> the server last seen there
	shards map[string]shard    // a Cluster's slot set -> its primary at the last check
}

// New returns a Watch that calls onChange (if not nil) at every change,
// from the goroutine that observed it, with no lock held.
func New(onChange func(Change)) *Watch {
	return &Watch{onChange: onChange, nodes: map[string]sighting{}, shards: map[string]shard{}}
}

// Changes returns how many changes the Watch has seen.
func (w *Watch) Changes() int64 { return w.changes.Load() }

// Observe records s as the server now at node and reports whether it is
// another process than the one seen there before: a run_id that
// differs, or, when the server reports no run_id, an uptime that went
// backwards. The first server seen at a node is no change.
func (w *Watch) Observe(node string, s Server) bool {
	w.mu.Lock()
	prev, known := w.nodes[node]
	w.nodes[node] = sighting{server: s, at: time.Now()}
	w.mu.Unlock()
	if !known || !replaced(prev.server, s) {
		return false
	}
	w.report(Change{Node: node, From: prev.server, To: s})
	return true
}

// replaced reports whether now is another process than prev: another
// run_id or, when neither has one, an uptime that went backwards.
func replaced(prev, now Server) bool {
	if now.RunID == "" && prev.RunID == "" {
		return now.Uptime < prev.Uptime
	}
	return now.RunID != prev.RunID
}

// report counts c and hands it to onChange. Called with no lock held.
func (w *Watch) report(c Change) {
	w.changes.Add(1)
	if w.onChange != nil {
		w.onChange(c)
	}
}

// Client is what Check sends INFO through: *redis.Client, the failover
// clients and *redis.ClusterClient satisfy it.
type Client interface {
	Info(ctx context.Context, section ...string) *redis.StringCmd
}

// Check asks the server behind client for INFO server and observes it:
// a single Redis (or a Sentinel group's primary, through a failover
// client) as node "", each primary of a Redis Cluster
// (*redis.ClusterClient) by its address and by the slots it serves
// (CLUSTER SLOTS), so that a replica promoted in its place, at another
// address, is a change, reported with its address, and a resharding is
// not (see the package comment); a primary whose slots were moved to
// asks it for INFO replication too. A Cluster's slot sets no primary
// serves any more, and addresses not seen for 10 minutes, are
// forgotten. It returns the first error met; a Cluster's nodes that
// answered are observed all the same.
func (w *Watch) Check(ctx context.Context, client Client) error {
	if cc, ok := client.(*redis.ClusterClient); ok {
		return w.checkCluster(ctx, cc, time.Now())
	}
	s, err := info(ctx, client)
	if err != nil {
		return err
	}
	w.Observe("", s)
	return nil
}

// info asks client for INFO server and parses it.
func info(ctx context.Context, client Client) (Server, error) {
	reply, err := client.Info(ctx, "server").Result()
	if err != nil {
		return Server{}, fmt.Errorf("runwatch: INFO server: %w", err)
	}
	return Parse(reply)
}
