package doctor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

// hostOffsetWarn is the offset between this host and Redis above which the
// clock check warns: instances correct their own offset (clocksync), but a
// Redis clock this far from a disciplined host means one of them is not
// kept by NTP.
const hostOffsetWarn = 500 * time.Millisecond

// timeSamples is the number of TIME calls of the host offset check.
const timeSamples = 5

// hostOffset measures Redis's TIME minus the local clock the way NTP does:
// it keeps the sample with the smallest round trip and assumes the reply
// was made at its midpoint.
func (r *run) hostOffset(ctx context.Context) (offset, rtt time.Duration, err error) {
	best := time.Duration(-1)
	for i := 0; i < timeSamples; i++ {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		t0 := r.opts.Now()
		m0 := time.Now()
		rt, e := r.client.Time(tctx).Result()
		d := time.Since(m0)
		cancel()
		if e != nil {
			err = e
			continue
		}
		if best < 0 || d < best {
			best = d
			mid := t0.Add(d / 2)
			offset = rt.Sub(mid)
		}
	}
	if best < 0 {
		return 0, 0, err
	}
	return offset, best, nil
}

func (r *run) clockChecks(ctx context.Context) {
	if r.down != nil {
		r.skipped(GroupClocks, "host-offset", "Redis's TIME not read, so this host's offset to Redis's clock is unknown")
		r.instanceClockChecks(ctx)
		return
	}
	r.check(GroupClocks, "host-offset", func(c *Check) {
		c.Read = fmt.Sprintf("%d TIME calls (the one with the smallest round trip is kept)", timeSamples)
		off, rtt, err := r.hostOffset(ctx)
		if err != nil {
			c.Status, c.Summary = Warn, "TIME failed: "+err.Error()
			return
		}
		c.Evidence = []string{fmt.Sprintf("Redis TIME minus this host's clock: %v (± %v, half the round trip)", off.Round(time.Microsecond), (rtt / 2).Round(time.Microsecond))}
		if abs(off) > hostOffsetWarn+rtt/2 {
			c.Status = Warn
			c.Summary = fmt.Sprintf("Redis's clock is %v away from this host's", off.Round(time.Millisecond))
			c.Fix = "check NTP (chronyc tracking / timedatectl) on the Redis host and on this one; instances correct their own offset, but a wandering Redis clock moves every window"
			return
		}
		c.Status = Pass
		c.Summary = fmt.Sprintf("Redis's clock is within %v of this host's (%v)", hostOffsetWarn, off.Round(time.Millisecond))
	})
	r.instanceClockChecks(ctx)
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// skewWarn is the instance clock offset above which the clock check
// warns, the threshold of the shipped RateLimitClockSkew alert.
const skewWarn = time.Second

// dateFail is how far an undisciplined instance's clock (read from its
// Date headers, to the second) may be from Redis's before the check
// fails: it fails only when every offset its headers allow is beyond.
const dateFail = 2 * time.Second

func (r *run) instanceClockChecks(ctx context.Context) {
	if len(r.opts.Instances) == 0 {
		return
	}
	ins := r.readInstances(ctx)
	r.check(GroupClocks, "instances", func(c *Check) {
		c.Read = fmt.Sprintf("%s and %s from /metrics, and the Date header of /readyz, of %s", metricSkew, metricSyncRTT, plural.Count(len(ins), "instance", "instances"))
		var redisOff, redisRTT time.Duration
		err := r.down
		if err == nil {
			redisOff, redisRTT, err = r.hostOffset(ctx)
		} else {
			c.Evidence = append(c.Evidence, "Redis's TIME not read (Redis is unreachable): no instance's Date header compared with Redis's clock")
		}
		if err == nil {
			c.Read += fmt.Sprintf("; %d TIME calls", timeSamples)
		}
		// The offset of each undisciplined instance's clock to Redis's,
		// from its Date headers (to the second: a range, see dateRange).
		dates := make(map[*instance]dateRange)
		if err == nil {
			var mu sync.Mutex
			var todo []*instance
			for _, in := range ins {
				if !in.date.date.IsZero() && undisciplined(in) {
					todo = append(todo, in)
				}
			}
			each(todo, func(in *instance) {
				d := r.dateOffset(ctx, in, redisOff, redisRTT/2)
				mu.Lock()
				defer mu.Unlock()
				dates[in] = d
			})
			more := 0
			for _, d := range dates {
				more += d.samples - 1
			}
			if more > 0 {
				c.Read += fmt.Sprintf("; %d more /readyz reads for their Date headers", more)
			}
		}
		worst, unread, inMemory := Pass, 0, 0
		for _, in := range ins {
			date, haveDate := dates[in]
			if in.store == "memory" {
				// Its clock is not disciplined, as one that never
				// measured (below): it warns, and fails past dateFail
				// (the ready check fails it for deciding alone). It
				// passed, under "every instance disciplines its clock".
				inMemory++
				line := in.url + ": runs in memory, its clock is not disciplined to Redis (the ready check says why that is wrong)"
				st := Warn
				if haveDate {
					line += "; " + date.String()
					if date.beyond() {
						st = Fail
					}
				}
				worst = max(worst, st)
				c.Evidence = append(c.Evidence, line)
				continue
			}
			if line, ok := metricsUnread(in); ok {
				unread++
				c.Evidence = append(c.Evidence, line)
				continue
			}
			skew, okSkew := sum(in.metrics, metricSkew, nil)
			rtt, okRTT := sum(in.metrics, metricSyncRTT, nil)
			switch {
			case !okSkew:
				worst = max(worst, Warn)
				c.Evidence = append(c.Evidence, notExported(in.url, metricSkew)+": its clock discipline cannot be seen")
			case okRTT && rtt == 0:
				// Registered but never measured: the instance does not
				// discipline its clock to Redis.
				line := fmt.Sprintf("%s: no clock sync round measured (%s is 0): timestamps are its raw clock", in.url, metricSyncRTT)
				st := Warn
				if haveDate {
					line += "; " + date.String()
					if date.beyond() {
						st = Fail
					}
				}
				worst = max(worst, st)
				c.Evidence = append(c.Evidence, line)
			default:
				off := time.Duration(skew * float64(time.Second))
				line := fmt.Sprintf("%s: disciplined to Redis, measured offset %v (± %v)", in.url, off.Round(time.Millisecond), time.Duration(rtt*float64(time.Second)/2).Round(time.Microsecond))
				if r.down != nil {
					line += " at its last sync, before Redis became unreachable"
				}
				if abs(off) > skewWarn {
					worst = max(worst, Warn)
					line += fmt.Sprintf(": its clock is %v from Redis's (corrected in its timestamps)", abs(off).Round(time.Millisecond))
				}
				c.Evidence = append(c.Evidence, line)
			}
		}
		c.Status = worst
		if worst == Pass && unread > 0 {
			c.Status = Warn
			c.Summary = fmt.Sprintf("the clock discipline of %s is unknown: %s /metrics could not be read", plural.Count(unread, "instance", "instances"), plural.Word(unread, "its", "their"))
			c.Fix = unreadFix(ins)
			return
		}
		switch {
		case worst == Fail:
			c.Summary = "an instance's clock is off by more than 2s and not disciplined: its windows open and close early or late, and its quota periods turn at the wrong time"
			c.Fix = "fix NTP on that host, and run instances with their clock disciplined to Redis (clocksync)"
		case worst == Warn:
			c.Summary = "an instance's clock is more than 1s from Redis's, is not disciplined to Redis, or its clock discipline cannot be seen"
			c.Fix = "fix NTP on the hosts (chronyc tracking); instances that discipline their clock to Redis (clocksync) correct the offset, but a large one means the host clock is broken"
		case r.down != nil:
			// Redis is unreachable: no instance can sync now, and the
			// values read are those of the last sync, not fresh ones.
			c.Status = Info
			c.Summary = fmt.Sprintf("every instance's clock was within %v of Redis's at its last sync; Redis is unreachable (see Redis/reachable), so none can sync now: these are the values as of then, not current ones", skewWarn)
		default:
			c.Summary = fmt.Sprintf("every instance disciplines its clock to Redis, within %v", skewWarn)
		}
		if inMemory > 0 {
			c.Fix += fmt.Sprintf("; %s in memory: run %s with --redis, as the others (serve disciplines its clock to Redis by default)",
				plural.Count(inMemory, "instance runs", "instances run"), plural.Word(inMemory, "it", "them"))
		}
	})
}

// undisciplined reports whether in's clock is known not to be
// disciplined to Redis: it runs in memory, or exports the clock gauges
// without a round measured. Its Date header is then what tells its clock.
func undisciplined(in *instance) bool {
	if in.store == "memory" {
		return true
	}
	if _, unread := metricsUnread(in); unread {
		return false
	}
	_, okSkew := sum(in.metrics, metricSkew, nil)
	rtt, okRTT := sum(in.metrics, metricSyncRTT, nil)
	return okSkew && okRTT && rtt == 0
}
