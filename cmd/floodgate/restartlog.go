package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/plural"
	"github.com/floodgate-rl/floodgate/internal/runwatch"
)

// The log messages of a Redis found to be another server process than
// before, or the same process with another server's data, by kind of
// change (runwatch.Kind). A restart's and a replacement's end with what
// the new process loaded (persistenceMsg).
const (
	// redisRestartMsg is a restart's: a new process at the primary's
	// address. Not "not promoted": one restarted as a replica of
	// another and promoted between two checks is a restart too (review3).
	redisRestartMsg = "Redis restarted (its run_id changed; a new process at the primary's address): "
	// redisFailoverMsg is a failover's: a replica promoted. A replica
	// promoted back before it resynced with the primary it replaced (a
	// failover back within seconds of another) holds older data.
	redisFailoverMsg = "Redis failed over (its run_id changed; the new primary was a replica): its counters, quotas and leases are those it replicated, but for the last writes before the failover, which asynchronous replication may have lost"
	// redisReplacedMsg is a replacement's: another server, not a replica.
	redisReplacedMsg = "Redis was replaced (its run_id changed; another server, not a replica, took over): "
	// redisResyncMsg is a resync's: the same process, made a replica of
	// another server and synced from it since the previous check, its
	// data that server's (an outside walk: REPLICAOF an empty server,
	// REPLICAOF NO ONE, every counter back to its limit, nothing said).
	// "Synced", not "fully synced": a failover to its replica and back
	// between two checks (a partial resync) looks the same, and then
	// that server held its data too. Not "and promoted": with
	// replica-read-only no the heartbeat, and the check after it,
	// succeed on the replica, seen as one (role slave).
	redisResyncMsg = "Redis resynced from another server (the same run_id, but its replication history is another server's since the previous check: it was made a replica of another server and synced from it; role says whether it is still a replica or was promoted since): its counters, quotas and leases are those that server held, none if it was empty"
	// redisResyncFailoverMsg is a resync's seen as a failover: a replica
	// promoted whose master_replid2 is not the old primary's
	// master_replid at the previous check, so it had synced from another
	// server (an outside walk behind Sentinel: the primary made a replica
	// of another server, its replica synced from it by chained
	// replication and promoted, remaining 89 then 99, logged as a
	// failover). The same IDs show after a replica attached for the
	// first time and promoted before a check, and after two failovers
	// between two checks: "not the old primary's as last checked".
	redisResyncFailoverMsg = "Redis failed over to a replica that held another server's data (its run_id changed; the new primary was a replica, but its replication history is not the one the old primary had at the previous check: it had synced from another server): its counters, quotas and leases are those that server held, none if it was empty"
)

// The ends of a restart's or a replacement's message, by what the new
// process loaded at its start (runwatch.Persistence).
const (
	// loadedAOFMsg: it runs with AOF. aof_enabled does not say whether
	// a file was loaded: a restart that turned AOF on loads nothing, its
	// dump.rdb ignored (review3).
	loadedAOFMsg = "it runs with AOF: its counters, quotas and leases are those its append-only file held when it started, none if this restart turned AOF on"
	// loadedRDBMsg: it loaded keys at its start (%d: how many): from its
	// RDB snapshot, or by a full sync from a primary when it started as
	// a replica (review3: rdb_last_load_keys_loaded counts both).
	loadedRDBMsg = "it loaded %s at its start (its RDB snapshot, or a full sync if it started as a replica): its counters, quotas and leases are those it loaded"
	// loadedNothingMsg: no AOF, no key loaded, done loading.
	loadedNothingMsg = "it loaded nothing: limits start over"
	// loadingMsg: it was still loading its data (without AOF) when INFO
	// persistence was read, %s the keys loaded so far and the
	// percentage when INFO gave it (loadingSoFar): a partial count, not
	// what it will hold, and never "nothing" (review4: "it loaded
	// 271,587 keys" of 2,000,000 being restored).
	loadingMsg = "it was still loading its data when checked: %s; its counters, quotas and leases will be those it loads"
	// loadingAOFMsg: it runs with AOF and was still loading its data
	// when checked (%s: the percentage loaded, when INFO gave it). The
	// keys loaded so far are not said: an append-only file's commands
	// are not counted in rdb_last_load_keys_loaded.
	loadingAOFMsg = "it runs with AOF and was still loading its data when checked%s: its counters, quotas and leases will be those its append-only file held when it started, none if this restart turned AOF on"
	// loadedUnknownMsg: INFO persistence failed or was refused.
	loadedUnknownMsg = "its counters, quotas and leases are only those it loaded from disk, none without persistence"
)

// changeMsg returns the log message of c: restartMsg of its kind and
// persistence, but for a resync by a failover (another run_id), whose
// line says so.
func changeMsg(c runwatch.Change) string {
	if c.Kind == runwatch.KindResync && c.From.RunID != c.To.RunID {
		return redisResyncFailoverMsg
	}
	return restartMsg(c.Kind, c.Persistence)
}

// restartMsg returns the log message of a change of kind k whose new
// process loaded p at its start (a restart's and a replacement's say
// what; a failover's does not depend on it; a resync's is the same
// process's, see changeMsg).
func restartMsg(k runwatch.Kind, p runwatch.Persistence) string {
	switch k {
	case runwatch.KindFailover:
		return redisFailoverMsg
	case runwatch.KindReplaced:
		return redisReplacedMsg + persistenceMsg(p)
	case runwatch.KindResync:
		return redisResyncMsg
	}
	return redisRestartMsg + persistenceMsg(p)
}

// persistenceMsg says what a process that loaded p has for counters.
func persistenceMsg(p runwatch.Persistence) string {
	switch {
	case !p.Known:
		return loadedUnknownMsg
	case p.Loading && p.AOF:
		return fmt.Sprintf(loadingAOFMsg, loadedPercent(p, " (", " of it)"))
	case p.Loading:
		return fmt.Sprintf(loadingMsg, plural.Count(p.LoadedKeys, "key", "keys")+" so far"+loadedPercent(p, " (", ")"))
	case p.AOF:
		return loadedAOFMsg
	case p.LoadedKeys > 0:
		return fmt.Sprintf(loadedRDBMsg, plural.Count(p.LoadedKeys, "key", "keys"))
	}
	return loadedNothingMsg
}

// loadedPercent returns the percentage of its data a process still
// loading had loaded, as "12.5%" between before and after, or "" when
// INFO gave none (p.LoadedPercent negative).
func loadedPercent(p runwatch.Persistence, before, after string) string {
	if p.LoadedPercent < 0 {
		return ""
	}
	return before + strconv.FormatFloat(p.LoadedPercent, 'f', -1, 64) + "%" + after
}

// restartRefusedRetry is how long restartCheck waits, after Redis refused
// INFO (an ACL user without +info), before asking again: one refusal
// per 10 minutes in Redis's ACL LOG, not one per heartbeat.
const restartRefusedRetry = 10 * time.Minute

// restartCheck watches, after each instance heartbeat (every 2 s), the
// run_id of the Redis serve decides on: a single Redis, the primary
// behind Sentinel, or each primary of a Cluster; and, of a single Redis
// or the primary behind Sentinel, its replication IDs (a resync). A
// Redis restarted without persistence briefly opened the breaker and
// then every counter was back at zero, with nothing said (an outside
// walk); so did one made a replica of an empty server and promoted back
// (another walk), and one whose replica, synced from another server, was
// promoted (a third). A change is logged at WARN (changeMsg: of its kind
// and of what the new process loaded, with the kind, the run_ids, the
// new server's uptime, its address when known, after a restart or a
// replacement aof and loading, with loaded_keys without AOF (with AOF
// rdb_last_load_keys_loaded counts only the keys of the file's RDB base,
// none of its commands: 0 for 5 keys restored) and loaded_perc while it
// was still loading, when INFO persistence answered, and after a resync
// from_replid, to_replid, to_replid2 and role) and counted by kind
// (floodgate_redis_restarts_total{kind}). Not safe for concurrent use:
// the heartbeat's goroutine runs it.
type restartCheck struct {
	watch        *runwatch.Watch
	client       runwatch.Client
	primary      func() string // the Sentinel group's primary; nil otherwise
	log          *slog.Logger
	refusedUntil time.Time // after a NOPERM: INFO not sent before then
}

// newRestartCheck returns the check of client's Redis, logging to log.
// primary returns the address of the primary the sentinels name behind
// Sentinel ("" while not known), and is nil otherwise.
func newRestartCheck(client runwatch.Client, primary func() string, log *slog.Logger) *restartCheck {
	return &restartCheck{client: client, primary: primary, log: log, watch: runwatch.New(func(c runwatch.Change) {
		args := []any{"kind", c.Kind.String(), "from_run_id", c.From.RunID, "to_run_id", c.To.RunID, "uptime", c.To.Uptime.String()}
		if c.Node != "" {
			args = append(args, "node", c.Node)
		} else if c.Addr != "" {
			args = append(args, "primary", c.Addr)
		}
		if c.Kind == runwatch.KindResync {
			args = append(args, "from_replid", c.FromRepl.ID, "to_replid", c.ToRepl.ID, "to_replid2", c.ToRepl.ID2, "role", c.ToRepl.Role)
		}
		if p := c.Persistence; p.Known {
			if !p.AOF {
				args = append(args, "loaded_keys", p.LoadedKeys)
			}
			args = append(args, "aof", p.AOF, "loading", p.Loading)
			if p.Loading && p.LoadedPercent >= 0 {
				args = append(args, "loaded_perc", p.LoadedPercent)
			}
		}
		log.Warn(changeMsg(c), args...)
	})}
}

// count returns how many changes of the kind named kind (a
// runwatch.Kind's String) the check has seen: 0 for a name no kind has.
func (r *restartCheck) count(kind string) int64 {
	for _, k := range runwatch.Kinds() {
		if k.String() == kind {
			return r.watch.ChangesOf(k)
		}
	}
	return 0
}

// run checks once, within ctx (fleet.Options.AfterBeat). Its errors are
// not logged, but for a refusal of INFO, logged once: Redis unreachable
// is the heartbeat's and the breaker's to say, and a restart is noticed
// at the first check that succeeds after it.
func (r *restartCheck) run(ctx context.Context) {
	if time.Now().Before(r.refusedUntil) {
		return
	}
	var err error
	if r.primary != nil {
		err = r.watch.CheckPrimary(ctx, r.client, r.primary)
	} else {
		err = r.watch.Check(ctx, r.client)
	}
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), "NOPERM") {
		return
	}
	if r.refusedUntil.IsZero() {
		r.log.Warn("redis: the ACL user may not send INFO (NOPERM), so a Redis restart or failover that loses counters is not noticed (floodgate_redis_restarts_total); grant the user +info", "error", err)
	}
	r.refusedUntil = time.Now().Add(restartRefusedRetry)
}
