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

// redisRestartMsg is the log message of a Redis found to be another
// server process than before.
const redisRestartMsg = "Redis restarted, failed over or was replaced (its run_id changed): its counters, quotas and leases are those it loaded or replicated, none after a restart without persistence; limits start over"

// restartRefusedRetry is how long restartCheck waits, after Redis refused
// INFO (an ACL user without +info), before asking again: one refusal
// per 10 minutes in Redis's ACL LOG, not one per heartbeat.
const restartRefusedRetry = 10 * time.Minute

// restartCheck watches, after each instance heartbeat (every 2 s), the
// run_id of the Redis serve decides on: a single Redis, the primary
// behind Sentinel, or each primary of a Cluster. A Redis restarted
// without persistence briefly opened the breaker and then every counter
// was back at zero, with nothing said (an outside walk). A change is
// logged at WARN (redisRestartMsg, with the run_ids and the new
// server's uptime) and counted (floodgate_redis_restarts_total). Not
// safe for concurrent use: the heartbeat's goroutine runs it.
type restartCheck struct {
	watch        *runwatch.Watch
	client       runwatch.Client
	log          *slog.Logger
	refusedUntil time.Time // after a NOPERM: INFO not sent before then
}

// newRestartCheck returns the check of client's Redis, logging to log.
func newRestartCheck(client runwatch.Client, log *slog.Logger) *restartCheck {
	return &restartCheck{client: client, log: log, watch: runwatch.New(func(c runwatch.Change) {
		args := []any{"from_run_id", c.From.RunID, "to_run_id", c.To.RunID, "uptime", c.To.Uptime.String()}
		if c.Node != "" {
			args = append(args, "node", c.Node)
		}
		log.Warn(redisRestartMsg, args...)
	})}
}

// run checks once, within ctx (fleet.Options.AfterBeat). Its errors are
// not logged, but for a refusal of INFO, logged once: Redis unreachable
// is the heartbeat's and the breaker's to say, and a restart is noticed
// at the first check that succeeds after it.
func (r *restartCheck) run(ctx context.Context) {
	if time.Now().Before(r.refusedUntil) {
		return
	}
	err := r.watch.Check(ctx, r.client)
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), "NOPERM") {
		return
	}
	if r.refusedUntil.IsZero() {
		r.log.Warn("redis: the ACL user may not send INFO (NOPERM), so a Redis restart or failover that loses counters is not noticed (floodgate_redis_restarts_total); grant the user +info", "error", err)
	}
	r.refusedUntil = time.Now().Add(restartRefusedRetry)
}
