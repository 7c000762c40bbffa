package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/runwatch"
)

// The log messages of a Redis found to be another server process than
// before, by kind of change (runwatch.Kind).
const (
	// redisRestartMsg is a restart's: the same primary, not promoted.
	redisRestartMsg = "Redis restarted (its run_id changed; the same primary, not promoted from replica): its counters, quotas and leases are only those it loaded from disk, none without persistence; limits start over"
	// redisFailoverMsg is a failover's: a replica promoted.
	redisFailoverMsg = "Redis failed over (its run_id changed; the new primary was a replica): its counters, quotas and leases are those it replicated, but for the last writes before the failover, which asynchronous replication may have lost"
	// redisReplacedMsg is a replacement's: another server, not a replica.
	redisReplacedMsg = "Redis was replaced (its run_id changed; another server, not a replica, took over): its counters, quotas and leases are only those it loaded from disk, none without persistence; limits start over"
)

// restartMsg returns the log message of a change of kind k.
func restartMsg(k runwatch.Kind) string {
	switch k {
	case runwatch.KindFailover:
		return redisFailoverMsg
	case runwatch.KindReplaced:
		return redisReplacedMsg
	}
	return redisRestartMsg
}

// restartRefusedRetry is how long restartCheck waits, after Redis refused
// INFO (an ACL user without +info), before asking again: one refusal
// per 10 minutes in Redis's ACL LOG, not one per heartbeat.
const restartRefusedRetry = 10 * time.Minute

// restartCheck watches, after each instance heartbeat (every 2 s), the
// run_id of the Redis serve decides on: a single Redis, the primary
// behind Sentinel, or each primary of a Cluster. A Redis restarted
// without persistence briefly opened the breaker and then every counter
// was back at zero, with nothing said (an outside walk). A change is
// logged at WARN (restartMsg of its kind, with the kind, the run_ids,
// the new server's uptime and its address when known) and counted by
// kind (floodgate_redis_restarts_total{kind}). Not safe for concurrent
// use: the heartbeat's goroutine runs it.
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
		log.Warn(restartMsg(c.Kind), args...)
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
