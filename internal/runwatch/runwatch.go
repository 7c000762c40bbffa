// Package runwatch tells when the Redis server a client talks to has
// become another server process: the run_id of its INFO server section
// changed (or, for a server that reports none, its uptime went
// backwards), or, for a single Redis and a Sentinel group's primary, the
// same process now holds another server's data (its replication history
// is another's), and what kind of change it was (Kind):
//   - a restart: the same primary (the same address) started again, not
//     promoted from replica. Its counters, quotas and leases are only
//     those it loaded from disk (Change.Persistence says what: its RDB
//     snapshot, its append-only file, or nothing, or that it was still
//     loading them, when INFO persistence answered): without
//     persistence, limits start over.
//   - a failover: the new primary was a replica, promoted (INFO
//     replication's master_replid2 is not all zeros: PSYNC2 keeps the
//     replication ID of the primary it followed) or, on a Cluster,
//     listed as the old primary's replica. Its counters are those it
//     replicated; the last writes before the failover may be lost to
//     asynchronous replication, and a replica promoted before it caught
//     up (failed back to within seconds of a failover) holds older ones.
//   - a replacement: another server, not a replica, took over (a Sentinel
//     group's primary now at another address, a Cluster slot set served
//     by a server started since): as after a restart, only what it
//     loaded.
//   - a resync: the same process (the same run_id), its data replaced by
//     another server's: made a replica of another server (REPLICAOF) and
//     fully synced from it, seen as that server's replica still or
//     promoted back since; or a replica promoted in the old primary's
//     place whose replication history is not the old primary's (it had
//     synced from another server: see below). Its counters, quotas and
//     leases are those the other server held, none when it was empty.
//
// A resync is told by INFO replication's replication IDs, read at every
// check of a single Redis or a Sentinel group's primary. A replica that
// fully syncs takes its primary's master_replid; one that continues its
// primary's history by a partial resync (PSYNC) keeps its own, or, when
// that primary was promoted since, takes the new one and keeps its own
// as master_replid2; REPLICAOF NO ONE moves master_replid to
// master_replid2 and draws a new one. So the same process with a
// master_replid other than the previous check's is a resync when its
// master_replid2 is not the previous check's master_replid either and
// it is a replica or names a master_replid2; the same history continued
// (no loss: a demotion and promotion back before any sync, or a partial
// resync seen as a replica) when its master_replid2 is that ID. A
// primary also draws a new master_replid, clearing master_replid2, when
// it gets a replica while it has no replication backlog, or frees its
// backlog: no resync. Two shifts between two checks look like a resync:
// a failover to one of its replicas and back, the old primary partially
// resynced meanwhile (serve checks only after a heartbeat, which a
// replica refuses), is reported as one though its data continued.
//
// A replica promoted continues the history of the primary it followed:
// its master_replid2 is that history's ID, the old primary's
// master_replid when it replicated the old primary. (When the previous
// check saw the old primary already demoted by a coordinated FAILOVER
// TO the new one, the old primary shared the new one's IDs: its
// master_replid is the new primary's.) A promoted process whose
// master_replid2 and master_replid are not the old primary's
// master_replid at the previous check (when that check read it), and that is not the process
// seen at its address before, replicated another server: a Sentinel
// group's primary made a replica of another server, its replica
// following it by chained replication and fully synced from it, then
// promoted (an outside walk, remaining 89 then 99, reported as a
// failover), or a replica made another server's and promoted before it
// synced back. It is a resync, not a failover. The same IDs show when
// the history changed between the previous check and the failover
// without data lost: the old primary got its first replica (or its
// first after repl-backlog-ttl freed its backlog), which draws a new
// master_replid, and that replica was promoted before a check saw the
// new ID; or two failovers happened between two checks. Either is
// reported as a resync though the data continued.
//
// For a single Redis, and a Sentinel group's primary at the address it
// had at the previous check, a master_replid2 alone is no proof of a
// promotion: a primary restarted from an RDB snapshot taken while it had
// a replica shows one (Redis writes its replication ID into the
// snapshot). A change there is a failover only when the new process
// also was up before the check that last saw the old one (its uptime
// exceeds the time since, with a second of slack: a replica running
// meanwhile behind the same endpoint), a resync when its history is
// another server's (above); else a restart. Behind Sentinel the
// primary's address is the one the sentinels name (CheckPrimary); a
// change to another address is a failover when the new primary is the
// process seen there before or was promoted with the old primary's
// history, a resync when it was promoted with another, else a
// replacement.
//
// A Cluster's primaries need no such check: a Cluster node refuses
// REPLICAOF, and a replica is promoted only in its own primary's place
// (CLUSTER FAILOVER, or the cluster's own failover), so the replica
// promoted for a slot set followed that slot set's primary.
//
// In a Redis Cluster, a primary is known both by its address and by the
// slots it serves. A new run_id at an address is a change; so is a slot
// set now served at another address by a replica promoted (a failover:
// the replica CLUSTER SLOTS listed for it, or one whose INFO replication
// names a master_replid2) or by a server started since the previous
// check (a replacement). A slot set moved whole to a primary that served
// slots at the previous check (even one promoted long ago), to another
// primary whose process is the one seen before, or to an empty primary
// up since before the previous check (a resharding: MIGRATE keeps every
// key), is no change, though the old owner may now be listed as its
// replica (replica migration, Redis's default, makes a primary resharded
// of its last slot a replica of the one that took it).
package runwatch

import (
	"context"
	"errors"
	"fmt"
	"iter"
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

// infoFields yields the key and value of each "key:value" line of an
// INFO reply (sections, comments and blank lines have no colon).
func infoFields(info string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for line := range strings.SplitSeq(info, "\n") {
			if key, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !yield(key, value) {
				return
			}
		}
	}
}

// Parse reads run_id and uptime_in_seconds from an INFO server reply.
// It fails, wrapping ErrNoIdentity, when the reply has neither, and on an
// uptime that is not a number of seconds.
func Parse(info string) (Server, error) {
	var s Server
	found := false
	for key, value := range infoFields(info) {
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

// Kind is what a Change was: a restart, a failover, a replacement or a
// resync.
type Kind int

const (
	// KindRestart is a new process at the primary's address (started
	// again, or started as a replica and promoted between two checks):
	// its counters are only those it loaded at its start, none without
	// persistence.
	KindRestart Kind = iota
	// KindFailover is a replica promoted in the old primary's place: its
	// counters are those it replicated, but for the last writes before
	// the failover (asynchronous replication); older for a replica
	// promoted back before it resynced with the primary it replaced.
	KindFailover
	// KindReplaced is another server, not a replica, in the old
	// primary's place: its counters are only those it loaded from disk.
	KindReplaced
	// KindResync is the same process (the same run_id) whose data was
	// replaced by another server's: made a replica of it and fully
	// synced, promoted back or not; or a replica promoted in the old
	// primary's place whose replication history is another server's
	// (see the package comment). Its counters are those the other server
	// held.
	KindResync
	numKinds = iota
)

// Kinds returns every Kind, in the order of their values.
func Kinds() []Kind { return []Kind{KindRestart, KindFailover, KindReplaced, KindResync} }

// String returns the kind's name as the metric's label value has it:
// "restart", "failover", "replaced" or "resync" ("unknown" for a value
// that is no Kind).
func (k Kind) String() string {
	switch k {
	case KindRestart:
		return "restart"
	case KindFailover:
		return "failover"
	case KindReplaced:
		return "replaced"
	case KindResync:
		return "resync"
	}
	return "unknown"
}

// Change is a server process found in place of another one.
type Change struct {
	// Node is the address of the Cluster node, "" for a single Redis
	// (or the primary of a Sentinel group).
	Node string
	// Addr is the address of the server seen now when it is known: the
	// Cluster node's (Node), the Sentinel group's primary as the
	// sentinels named it (CheckPrimary); "" for a single Redis.
	Addr string
	// Kind is what the change was.
	Kind Kind
	// From and To are the server seen before and the one seen now (the
	// same run_id for a resync).
	From, To Server
	// FromRepl and ToRepl are the replication IDs seen at the previous
	// check (of From) and now (of To), for a resync; zero for the other
	// kinds.
	FromRepl, ToRepl Replication
	// Persistence is what To loaded at its start, for a restart or a
	// replacement read from INFO persistence after the change was seen
	// (not Known for a failover, or when that failed); Loading when To
	// was still loading its data then, its LoadedKeys those loaded so
	// far. The change is reported (and counted) when it is seen, also
	// mid-load: its Kind does not depend on what To loaded.
	Persistence Persistence
}

// forgetAfter is how long a Watch remembers a node no check has seen:
// the addresses a Cluster's primaries once had are forgotten, so that a
// Watch does not grow with every address ever seen. A node seen again
// after it is a first sighting.
const forgetAfter = 10 * time.Minute

// sighting is a server process seen at a node, at which address (a
// Sentinel group's primary; "" when not known), serving which slots (a
// Cluster primary's slot set as CLUSTER SLOTS listed it; "" for none, or
// not a Cluster), with which replication IDs (a single Redis's or a
// Sentinel group's primary; zero when not known), and when.
type sighting struct {
	server Server
	addr   string
	slots  string
	repl   Replication
	at     time.Time
}

// Replication is what INFO replication says of a server's replication
// history.
type Replication struct {
	// Role is "master" or "slave" (a replica).
	Role string
	// ID is master_replid: the ID of the history the server's data
	// follows ("" when INFO gave none).
	ID string
	// ID2 is master_replid2: the ID of the history it followed before
	// its last shift (a promotion, or a partial resync with a primary
	// promoted since); all zeros for none.
	ID2 string
}

// ParseReplication reads role, master_replid and master_replid2 from an
// INFO replication reply; fields missing are "".
func ParseReplication(info string) Replication {
	var r Replication
	for key, value := range infoFields(info) {
		switch key {
		case "role":
			r.Role = value
		case "master_replid":
			r.ID = value
		case "master_replid2":
			r.ID2 = value
		}
	}
	return r
}

// promoted reports whether r names a master_replid2 other than all
// zeros: its server was promoted from replica (or, as a replica,
// continued the history of a primary promoted since).
func (r Replication) promoted() bool { return strings.Trim(r.ID2, "0") != "" }

// resynced reports whether the same process, seen with replication IDs
// prev at the previous check and now at this one, now holds another
// server's history: its master_replid changed, its master_replid2 is
// not the one it had (REPLICAOF NO ONE and a partial resync with a
// primary promoted since keep it there), and it is a replica or was
// promoted (a master_replid2): a primary that gets a replica while it
// has no replication backlog (its first, or the first after
// repl-backlog-ttl), or frees its backlog, draws a new master_replid and
// clears master_replid2, its data unchanged. Unknown IDs ("") are no
// resync.
func resynced(prev, now Replication) bool {
	return prev.ID != "" && now.ID != "" && now.ID != prev.ID && now.ID2 != prev.ID &&
		(now.Role == "slave" || now.promoted())
}

// Watch remembers the server process last seen per node (and, in a
// Redis Cluster, per slot set) and reports when another one is seen in
// its place. The zero value is not usable: call New. Safe for concurrent
// use.
type Watch struct {
	onChange func(Change)
	changes  [numKinds]atomic.Int64 // by Kind

	mu    sync.Mutex
	nodes map[string]sighting // node -> the server last seen there
	// primaries are a Sentinel group's primaries by address: the server
	// last seen there (CheckPrimary).
	primaries map[string]sighting
	shards    map[string]shard // a Cluster's slot set -> its primary at the last check
}

// New returns a Watch that calls onChange (if not nil) at every change,
// from the goroutine that observed it, with no lock held.
func New(onChange func(Change)) *Watch {
	return &Watch{onChange: onChange, nodes: map[string]sighting{}, primaries: map[string]sighting{}, shards: map[string]shard{}}
}

// Changes returns how many changes the Watch has seen, of every kind.
func (w *Watch) Changes() int64 {
	var n int64
	for _, k := range Kinds() {
		n += w.ChangesOf(k)
	}
	return n
}

// ChangesOf returns how many changes of kind k the Watch has seen (0 for
// a value that is no Kind).
func (w *Watch) ChangesOf(k Kind) int64 {
	if k < 0 || k >= numKinds {
		return 0
	}
	return w.changes[k].Load()
}

// Observe records s as the server now at node and reports whether it is
// another process than the one seen there before: a run_id that
// differs, or, when the server reports no run_id, an uptime that went
// backwards. The first server seen at a node is no change. Observe knows
// neither addresses nor replication: a change it reports is a restart
// (Check and CheckPrimary tell the kinds apart).
func (w *Watch) Observe(node string, s Server) bool {
	return w.observe(node, "", s, Replication{}, time.Now())
}

// observe records s as the server now at node, at addr ("" when not
// known), with replication IDs repl, at now, and reports a change (see
// classify) when it is another process than the one seen there before,
// or the same process resynced from another server.
func (w *Watch) observe(node, addr string, s Server, repl Replication, now time.Time) bool {
	c, changed := w.classify(node, addr, s, repl, now)
	if changed {
		w.report(c)
	}
	return changed
}

// classify records s as the server now at node, at addr ("" when not
// known), with replication IDs repl (zero when not known: the previous
// ones are kept for the same process), at now, and returns the change it
// is, if any: another process than the one seen there before, of the
// kind singleKind says (promoted: repl names a master_replid2, see
// wasReplica), or the same process resynced from another server (see
// resynced). Addresses not seen for forgetAfter are forgotten.
func (w *Watch) classify(node, addr string, s Server, repl Replication, now time.Time) (Change, bool) {
	w.mu.Lock()
	prev, known := w.nodes[node]
	same := known && !replaced(prev.server, s)
	kept := repl
	if same && repl.ID == "" {
		kept = prev.repl
	}
	w.nodes[node] = sighting{server: s, addr: addr, repl: kept, at: now}
	for a, sg := range w.primaries {
		if now.Sub(sg.at) > forgetAfter {
			delete(w.primaries, a)
		}
	}
	there, wasThere := w.primaries[addr]
	if addr != "" {
		w.primaries[addr] = sighting{server: s, addr: addr, at: now}
	}
	w.mu.Unlock()
	if same && resynced(prev.repl, repl) {
		return Change{Node: node, Addr: addr, Kind: KindResync, From: prev.server, To: s, FromRepl: prev.repl, ToRepl: repl}, true
	}
	if !known || same {
		return Change{}, false
	}
	a := arrived{
		promoted:     repl.promoted(),
		otherHistory: otherHistory(prev.repl, repl),
		seenThere:    wasThere && !replaced(there.server, s),
		upBefore:     upBefore(s, prev.at, now),
	}
	c := Change{Node: node, Addr: addr, Kind: singleKind(prev.addr, addr, a), From: prev.server, To: s}
	if c.Kind == KindResync {
		c.FromRepl, c.ToRepl = prev.repl, repl
	}
	return c, true
}

// otherHistory reports whether a promoted process, with replication IDs
// now, continues another history than the one of the process it
// replaced, seen with prev at the previous check: neither its
// master_replid2 nor its master_replid is prev's master_replid. The
// second holds when the previous check saw the old primary already
// demoted by a coordinated FAILOVER TO the new one, a replica sharing
// the new primary's IDs (with replica-read-only no the heartbeat, and
// the check after it, succeed on the replica): the same history, which
// was taken for a resync (review14). False when either is not known.
func otherHistory(prev, now Replication) bool {
	return prev.ID != "" && now.promoted() && now.ID2 != prev.ID && now.ID != prev.ID
}

// uptimeSlack is the slack upBefore allows: uptime_in_seconds is in
// whole seconds, and Redis's clock for it is cached.
const uptimeSlack = time.Second

// upBefore reports whether s was already running at the check that last
// saw the process it replaced (at seen; now is the check that sees s):
// its uptime exceeds the time since by more than uptimeSlack. A process
// started after that check, as a restart's is, never is.
func upBefore(s Server, seen, now time.Time) bool {
	return s.Uptime > now.Sub(seen)+uptimeSlack
}

// arrived is what a check knows of the process found in place of a
// single Redis's or a Sentinel group's primary.
type arrived struct {
	// promoted: INFO replication names a master_replid2 (see
	// wasReplica). A primary restarted from an RDB snapshot taken while
	// it had a replica has one too: Redis writes its replication ID into
	// the snapshot, and shows it as master_replid2 after loading it.
	promoted bool
	// otherHistory: promoted, its master_replid2 is not the old
	// primary's master_replid at the previous check (see otherHistory):
	// it replicated another server.
	otherHistory bool
	// seenThere: the process is the one seen at its address before (a
	// Sentinel primary the sentinels named before).
	seenThere bool
	// upBefore: the process was up before the check that last saw the
	// one it replaced (see upBefore).
	upBefore bool
}

// singleKind is the kind of a change of a single Redis or a Sentinel
// group's primary, from the address it had (from) to the one it has
// (to), either "" when not known (a single Redis's are both ""), of the
// process a:
//   - at the same address, a failover only when the process was
//     promoted and up before the check that last saw the old one (a
//     replica, running meanwhile behind the same endpoint, a managed
//     Redis's primary endpoint for one): a master_replid2 alone is no
//     proof, a primary restarted from an RDB snapshot taken while it had
//     a replica shows one; a resync instead when its history is another
//     than the old primary's (otherHistory); else a restart;
//   - at another address, a failover when the process is the one seen
//     at to before (a primary the sentinels named before, back before
//     they made it a replica: it holds what it had then), or was
//     promoted with the old primary's history; a resync when it was
//     promoted with another history (otherHistory); else a replacement
//     when both addresses are known; else a restart.
func singleKind(from, to string, a arrived) Kind {
	switch {
	case from == to && a.promoted && a.upBefore && a.otherHistory:
		return KindResync
	case from == to && a.promoted && a.upBefore:
		return KindFailover
	case from == to:
		return KindRestart
	case a.seenThere:
		return KindFailover
	case a.promoted && a.otherHistory:
		return KindResync
	case a.promoted:
		return KindFailover
	case from != "" && to != "":
		return KindReplaced
	}
	return KindRestart
}

// replaced reports whether now is another process than prev: another
// run_id or, when neither has one, an uptime that went backwards.
func replaced(prev, now Server) bool {
	if now.RunID == "" && prev.RunID == "" {
		return now.Uptime < prev.Uptime
	}
	return now.RunID != prev.RunID
}

// report counts c by its kind and hands it to onChange. Called with no
// lock held.
func (w *Watch) report(c Change) {
	if c.Kind >= 0 && c.Kind < numKinds {
		w.changes[c.Kind].Add(1)
	}
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
// client, its address unknown: see CheckPrimary) as node "", each
// primary of a Redis Cluster (*redis.ClusterClient) by its address and
// by the slots it serves (CLUSTER SLOTS), so that a replica promoted in
// its place, at another address, is a change, reported with its
// address, and a resharding is not (see the package comment); a primary
// whose slots were moved to asks it for INFO replication too. A
// Cluster's slot sets no primary serves any more, and addresses not
// seen for 10 minutes, are forgotten. A single Redis is asked for INFO
// replication at every check: to tell a failover (a replica promoted)
// from a restart when its run_id changed, and a resync (its data
// replaced by another server's) when it did not. It returns the first
// error met; a Cluster's nodes that answered are observed all the same.
// A single Redis whose run_id changed and that failed INFO replication
// is not observed (the next check sees the change again); one whose
// run_id did not is, its replication IDs kept from the previous check.
func (w *Watch) Check(ctx context.Context, client Client) error {
	if cc, ok := client.(*redis.ClusterClient); ok {
		return w.checkCluster(ctx, cc, time.Now())
	}
	return w.checkSingle(ctx, client, nil)
}

// CheckPrimary is Check for a Sentinel group's primary, whose address
// primary returns (the one the sentinels name: "" while not known). A
// change to a server at another address is a failover when the server
// was promoted from replica with the old primary's history (or is the
// one seen there before), a resync when it was promoted with another
// server's history, a replacement when it was not promoted; at the same
// address, a restart unless the server was promoted and up before the
// previous check (see the package comment). A check during which
// primary's answer changed observes nothing: the INFO reply may be the
// old primary's, and the next check asks again.
func (w *Watch) CheckPrimary(ctx context.Context, client Client, primary func() string) error {
	return w.checkSingle(ctx, client, primary)
}

// checkSingle checks a single Redis, or a Sentinel group's primary at
// the address primary returns (nil: not known), as node "".
func (w *Watch) checkSingle(ctx context.Context, client Client, primary func() string) error {
	addr := ""
	if primary != nil {
		addr = primary()
	}
	s, err := info(ctx, client)
	if err != nil {
		return err
	}
	repl, replErr := replicationOf(ctx, client)
	if primary != nil && primary() != addr {
		return nil
	}
	if replErr != nil && w.changed("", s) {
		return replErr
	}
	if c, ok := w.classify("", addr, s, repl, time.Now()); ok {
		w.report(withPersistence(ctx, client, c))
	}
	return replErr
}

// changed reports whether s is another process than the one last seen
// at node (false for a first sighting).
func (w *Watch) changed(node string, s Server) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, known := w.nodes[node]
	return known && replaced(prev.server, s)
}

// replicationOf asks client for INFO replication and parses it.
func replicationOf(ctx context.Context, client Client) (Replication, error) {
	reply, err := client.Info(ctx, "replication").Result()
	if err != nil {
		return Replication{}, fmt.Errorf("runwatch: INFO replication: %w", err)
	}
	return ParseReplication(reply), nil
}

// info asks client for INFO server and parses it.
func info(ctx context.Context, client Client) (Server, error) {
	reply, err := client.Info(ctx, "server").Result()
	if err != nil {
		return Server{}, fmt.Errorf("runwatch: INFO server: %w", err)
	}
	return Parse(reply)
}
