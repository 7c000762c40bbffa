package doctor

import (
	"fmt"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

// checkDivisor reports what each instance's local fallback divides each
// limit by now (floodgate_fallback_instances): the larger of --instances
// and the live count it last saw, which it keeps while Redis is
// unreachable. An instance below the fleet's size (the instances given
// on Redis, or the most any of them counts) admits more than its share
// while it decides without Redis: one that started during an outage has
// seen no count and divides by --instances alone (1 by default, the
// whole limit). It reads nothing more than the /metrics already read, so
// it runs with Redis unreachable too, when it matters most; it warns
// then, and fails when Redis is unreachable.
func (r *run) checkDivisor(c *Check, ins []*instance, read string) {
	c.Read = read + " (no extra request)"
	type divisor struct {
		url string
		n   int64
	}
	var divs []divisor
	onRedis, unread := 0, 0
	var fleet int64
	for _, in := range ins {
		if in.notFloodgate != "" || in.readyStatus == 0 || in.store == "memory" {
			continue
		}
		onRedis++
		if line, ok := metricsUnread(in); ok {
			unread++
			c.Evidence = append(c.Evidence, line)
			continue
		}
		d, ok := sum(in.metrics, metricFallbackInstances, nil)
		if !ok {
			c.Evidence = append(c.Evidence, notExported(in.url, metricFallbackInstances)+" (or serve runs without a local fallback)")
			continue
		}
		line := fmt.Sprintf("%s: the fallback divides each limit by %.0f", in.url, d)
		if n, ok := sum(in.metrics, metricInstancesLive, nil); ok {
			line += fmt.Sprintf(" (it counts %s)", plural.Count(int64(n), "live instance", "live instances"))
			fleet = max(fleet, int64(n))
		}
		c.Evidence = append(c.Evidence, line)
		divs = append(divs, divisor{in.url, int64(d)})
		fleet = max(fleet, int64(d))
	}
	fleet = max(fleet, int64(onRedis))
	if len(divs) == 0 {
		c.Status = Info
		c.Summary = "no instance exports " + metricFallbackInstances + " (no instance on Redis, an older version, or no local fallback)"
		if unread > 0 {
			c.Status, c.Fix = Warn, unreadFix(ins)
			c.Summary = fmt.Sprintf("the fallback divisor of %s is unknown: %s /metrics could not be read", plural.Count(unread, "instance", "instances"), plural.Word(unread, "its", "their"))
		}
		return
	}
	var low []string
	alone := false
	for _, d := range divs {
		if d.n < fleet {
			low = append(low, fmt.Sprintf("%s by %d", d.url, d.n))
			alone = alone || d.n <= 1
		}
	}
	if len(low) == 0 {
		c.Status = Pass
		c.Summary = fmt.Sprintf("every fallback divides each limit by the fleet's %d instances or more", fleet)
		if unread > 0 {
			c.Status, c.Fix = Warn, unreadFix(ins)
			c.Summary += fmt.Sprintf("; that of %s is unknown: %s /metrics could not be read", plural.Count(unread, "instance", "instances"), plural.Word(unread, "its", "their"))
		}
		return
	}
	c.Status = Warn
	when := "while deciding without Redis"
	if r.down != nil {
		// The fallback is deciding now, if the instances cannot reach
		// Redis either (Instances/ready says whether they are degraded).
		c.Status, when = Fail, "now that Redis is unreachable"
	}
	c.Summary = fmt.Sprintf("%d of %s each limit by fewer than the fleet's %d (%s): %s more than %s share %s", len(low),
		plural.Count(len(divs), "instance's fallback divides", "instances' fallbacks divide"), fleet, strings.Join(low, ", "),
		plural.Word(len(low), "it admits", "they admit"), plural.Word(len(low), "its", "their"), when)
	if alone {
		c.Summary += " (an instance dividing by 1 admits the whole limit)"
	}
	c.Fix = "set --instances to the number of instances you usually run on every instance (the Kubernetes manifests set it to the replica count): the live count only raises it. An instance started while Redis was unreachable has seen no live count and divides by --instances alone until Redis answers; one counting fewer than the others heartbeats under another --prefix or Redis (see redis-and-prefix)"
}
