package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocksync"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/fleet"
	"github.com/floodgate-rl/floodgate/internal/ratelog"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/server"
)

// serviceClock is the time decisions are stamped with.
type serviceClock struct {
	now  func() time.Time
	sync *clocksync.Clock // nil: the local clock, uncorrected
}

// startClock returns the service's clock: on Redis with --clock-sync, the
// local clock disciplined to Redis's TIME (one round now, then Run every
// 10s); otherwise the local clock. --clock-offset shifts the local clock
// (to test skewed machines).
func startClock(ctx context.Context, f serveFlags, b *backend, m *metrics.Metrics, log *slog.Logger) (serviceClock, error) {
	local := time.Now
	if f.clockOffset != 0 {
		off := f.clockOffset
		local = func() time.Time { return time.Now().Add(off) }
	}
	if b.client == nil || !f.clockSync {
		return serviceClock{now: local}, nil
	}
	// The skew warning and the failed-round warning are each logged at
	// most once a minute, apart: one must not hide the other.
	var mu sync.Mutex
	var lastSkewWarn, lastSyncWarn time.Time
	var synced atomic.Bool // a round has succeeded: logged once, when it first does
	obs := skewWatch{m: m, limit: f.clockSkewWarn, warn: func(offset, rtt time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(lastSkewWarn) < time.Minute {
			return
		}
		lastSkewWarn = time.Now()
		log.Warn("this machine's clock is off Redis's; decisions use Redis's time", "skew", offset.String(), "rtt", rtt.String(), "warn_above", f.clockSkewWarn.String())
	}, first: func(offset, rtt time.Duration) {
		if !synced.Swap(true) {
			log.Info("clock disciplined to Redis", "skew", offset.String(), "rtt", rtt.String())
		}
	}}
	c, err := clocksync.New(b.client, clocksync.Options{Now: local, Observer: obs, OnStep: logStep(log), OnError: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(lastSyncWarn) < time.Minute {
			return
		}
		lastSyncWarn = time.Now()
		if !synced.Load() {
			log.Warn("clock sync with Redis failed, and no round has succeeded yet: decisions use the local clock, uncorrected, until one does (tried every second)", "error", err)
			return
		}
		log.Warn("clock sync with Redis failed; keeping the last offset", "error", err)
	}})
	if err != nil {
		return serviceClock{}, err
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Sync(sctx); err != nil {
		mu.Lock()
		lastSyncWarn = time.Now()
		mu.Unlock()
		log.Warn("clock sync with Redis failed at startup; using the local clock until it succeeds (tried every second)", "error", err)
	}
	return serviceClock{now: c.Now, sync: c}, nil
}

// logStep returns serve's clocksync.Options.OnStep: a warning at every
// round whose offset moved by more than clocksync.StepReport, apart from
// the skew warning and its once a minute (a round comes every 10 s, so
// at most one line per 10 s). The offset is Redis's clock minus this
// machine's: every instance logging the same step at once means Redis's
// clock moved (an NTP step on its host, a failover to a host whose clock
// differs), one alone its own host's clock.
func logStep(log *slog.Logger) func(from, to time.Duration) {
	return func(from, to time.Duration) {
		log.Warn("Redis clock stepped (or this machine's): decisions follow Redis's time from now on", "from", from.String(), "to", to.String(), "step", (to - from).String())
	}
}

// skewWatch feeds the skew gauges, warns above a limit and reports each
// successful round to first (which logs the first one).
type skewWatch struct {
	m     *metrics.Metrics
	limit time.Duration
	warn  func(offset, rtt time.Duration)
	first func(offset, rtt time.Duration)
}

// ObserveClock implements clocksync.Observer.
func (w skewWatch) ObserveClock(offset, rtt time.Duration) {
	w.m.ObserveClock(offset, rtt)
	if w.first != nil {
		w.first(offset, rtt)
	}
	if w.limit > 0 && (offset > w.limit || offset < -w.limit) {
		w.warn(offset, rtt)
	}
}

// Heartbeat timing of serve's instances: a beat every heartbeatInterval,
// an instance silent for heartbeatTTL no longer counted.
const (
	heartbeatInterval = 2 * time.Second
	heartbeatTTL      = 3 * heartbeatInterval
)

// heartbeatID returns this process's id in the live instance count,
// host:pid:start time (base 36 nanoseconds), which /readyz reports.
func heartbeatID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), strconv.FormatInt(time.Now().UnixNano(), 36))
}

// startHeartbeat makes this instance count in the live instance count
// that the local fallback divides limits by (never fewer than
// --instances). The beats are scored by Redis's own clock (TIME), so that
// an instance whose clock runs ahead does not drop the others from the
// count. After Redis has been unreachable, or has lost the set without a
// failed beat (restarted between two beats), the count held before is
// kept for one TTL of beats: a Redis back empty is refilled by the instances'
// beats one by one, and an outage again in that time found counts of 1
// and 2 among three instances (an outside walk: 55 admitted against a
// limit of 30). After each successful beat it checks whether Redis is
// still the same server process (restartCheck).
// id is heartbeatID's.
func startHeartbeat(f serveFlags, b *backend, id string, reg prometheus.Registerer, log *slog.Logger) (*fleet.Heartbeat, error) {
	var mu sync.Mutex
	var lastWarn, holdUntil time.Time
	// counted is the last count a beat returned; holdFrom the count held
	// after a failure or a lost set: the one in use when it began, kept
	// while failures recur within a hold.
	counted, used, holdFrom, failing := 0, 0, 0, false
	fail := func() { // with mu held
		if !failing && !time.Now().Before(holdUntil) {
			holdFrom = used
		}
		failing = true
	}
	// After each beat, whether the Redis is the same server process.
	var primary func() string
	if b.follow != nil {
		primary = b.follow.Primary
	}
	restarts := newRestartCheck(b.client, primary, log)
	if reg != nil {
		if err := metrics.RegisterRedisRestarts(reg, restarts.count); err != nil {
			return nil, err
		}
	}
	return fleet.New(b.client, fleet.Key(f.prefix), id, fleet.Options{Interval: heartbeatInterval, TTL: heartbeatTTL, Registerer: reg,
		AfterBeat: restarts.run,
		OnRejoin: func() {
			// Redis lost the set without a failed beat (restarted
			// between two): hold the count as after a failure.
			mu.Lock()
			defer mu.Unlock()
			fail()
		},
		OnCount: func(n int) {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			if failing {
				failing, holdUntil = false, now.Add(heartbeatTTL)
			}
			counted, used = n, n
			if now.Before(holdUntil) {
				used = max(n, holdFrom)
			}
			if b.fb != nil {
				b.fb.SetInstances(max(used, f.instances))
			}
		},
		OnError: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			fail()
			if time.Since(lastWarn) < time.Minute {
				return
			}
			lastWarn = time.Now()
			switch {
			case b.fb == nil: // --fallback off: the count only feeds floodgate_instances_live
				log.Warn("instance heartbeat failed", "error", err)
			case counted == 0:
				log.Warn("instance heartbeat failed before any count: the local fallback divides limits by --instances until Redis answers; set it to the usual number of instances", "instances", max(f.instances, 1), "error", err)
			default:
				log.Warn("instance heartbeat failed; the fallback keeps the last instance count", "instances", max(used, f.instances), "error", err)
			}
		}})
}

// breakerLog is the fallback's observer: the metrics, a log line at every
// breaker change (rare: an outage opens it once, recovery closes it),
// naming the error that opened it, and, while it is open, a line when its
// probes fail for another reason (probeLog).
type breakerLog struct {
	*metrics.Metrics
	log  *slog.Logger
	seen *sync.Map // partitions whose breaker has reported its first state
	// redirects logs the Redis calls a Cluster node redirected, at most
	// once per redirectLogEvery (nil: not logged).
	redirects *ratelog.Log
	probes    *probeLog
	// replies, if set, remembers the error that opened a breaker, for
	// /readyz (see server.ErrorReplies).
	replies *server.ErrorReplies
}

// newBreakerLog returns the observer serve gives its fallback, logging to
// log.
func newBreakerLog(m *metrics.Metrics, log *slog.Logger) breakerLog {
	return breakerLog{Metrics: m, log: log, seen: new(sync.Map), redirects: ratelog.New(log, redirectLogEvery),
		probes: newProbeLog(log, probeLogEvery)}
}

// redirectLogEvery is how often at most a redirected call is logged.
const redirectLogEvery = 10 * time.Second

// ObservePrimary implements fallback.Observer: the metrics, and an error
// logged (at most once per redirectLogEvery) for a call a Redis Cluster
// node redirected (MOVED or ASK), which a single Redis's client does not
// follow, or refused for keys in several slots (CROSSSLOT): the Redis of
// --redis is then a node of a Cluster. Its calls
// fail (decisions, tier lookups, the instance heartbeat) and open the
// breaker, whose log says only that it opened; this names the cause.
func (b breakerLog) ObservePrimary(d time.Duration, err error) {
	b.Metrics.ObservePrimary(d, err)
	if err == nil || b.redirects == nil {
		return
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	// CROSSSLOT: a call of keys in several slots (a layered decision),
	// which only a Cluster node refuses.
	crossSlot := strings.Contains(err.Error(), "CROSSSLOT ")
	if moved || ask || crossSlot || errors.Is(err, floodgate.ErrClusterRedirect) {
		b.redirects.Error(context.Background(), "cluster-redirect", "a Redis Cluster node refused a call (MOVED, ASK or CROSSSLOT): the Redis of --redis is a node of a Redis Cluster, given as a single Redis; give the Cluster's nodes with --redis-cluster host:port,... (or a redis-cluster:// URL)",
			"error", err)
	}
}

// ObserveBreaker implements fallback.Observer: ObserveBreakerCause with
// no cause. (The fallback calls ObserveBreakerCause.)
func (b breakerLog) ObserveBreaker(partition string, s fallback.BreakerState) {
	b.ObserveBreakerCause(partition, s, nil)
}

// ObserveBreakerCause implements fallback.CauseObserver: the metric, and
// a log line, the opening's with the error of the call that opened the
// breaker (it said only that it opened: an outside walk read a Redis
// restart's LOADING, NOAUTH or WRONGPASS nowhere in it). A breaker's
// first report, its closed state when it is made, is not logged: it
// says nothing of Redis (serve makes the default partition's breaker at
// start, whether Redis is up or not), and "deciding with Redis" followed
// at once by the breaker opening would mislead whoever reads the log of
// a start with Redis down.
func (b breakerLog) ObserveBreakerCause(partition string, s fallback.BreakerState, cause error) {
	b.Metrics.ObserveBreaker(partition, s)
	if _, known := b.seen.LoadOrStore(partition, struct{}{}); !known && s == fallback.BreakerClosed {
		return
	}
	if b.probes != nil {
		b.probes.changed(partition, s, cause)
	}
	b.replies.Record(partition, cause)
	if s == fallback.BreakerClosed {
		b.log.Info("circuit breaker closed: deciding with Redis", "partition", partition)
		return
	}
	args := []any{"partition", partition}
	if cause != nil {
		args = append(args, "error", cause)
	}
	b.log.Warn("circuit breaker "+s.String()+": decisions taken by each policy's failure mode", args...)
}

// ObserveProbe implements fallback.CauseObserver: see probeLog.
func (b breakerLog) ObserveProbe(partition string, err error) {
	if b.probes != nil {
		b.probes.probed(partition, err)
	}
}

// ForgetBreaker implements fallback.BreakerForgetter: the partition's
// breaker was dropped (a Cluster primary no longer in the slot map). Its
// series go, the drop is logged, and a breaker made again for the same
// address (the node promoted back) starts unlogged, as a new one does: it
// was logged "closed: deciding with Redis" with no open state before.
func (b breakerLog) ForgetBreaker(partition string) {
	b.Metrics.ForgetBreaker(partition)
	b.seen.Delete(partition)
	if b.probes != nil {
		b.probes.changed(partition, fallback.BreakerClosed, nil)
	}
	b.log.Info("circuit breaker dropped: no longer a Redis primary", "partition", partition)
}
