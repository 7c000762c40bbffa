package doctor

import (
	"context"
	"fmt"
	"time"
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
