package doctor_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestUndisciplinedDateHeaderJudgedByRange: an undisciplined instance's
// clock is read from its Date header, which is its clock truncated to the
// second, so one header allows a second of offsets. The check compared it
// with an instant: an outside walk's instance 1.5 s behind Redis failed
// ("its Date header is -2s") 2 runs in 5, one 2.6 s ahead failed only 3
// in 5 ("+2s"), and one in step read "-1s" a run in 4. Now the header
// gives a range, narrowed by more headers while it leaves the verdict
// open, and the check fails only when all of it is beyond 2 s: in step
// and 1.5 s off (either way) warn (undisciplined) and never fail, 2.6 s
// off always fails; each range holds the instance's true offset.
//
// Each instance is a real HTTP server whose Date header comes from its
// own skewed clock, compared with a real Redis's TIME (both clocks are
// this machine's). Doctor runs at four phases of the second (the old
// check's verdict depended on it).
func TestUndisciplinedDateHeaderJudgedByRange(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "dh", testConfig)
	start := func(ahead time.Duration) string {
		return startInstance(t, client, "dh", instanceOptions{doc: testConfig, clockAhead: ahead, dateFromClock: true}).url
	}
	within := map[string]time.Duration{start(0): 0, start(-1500 * time.Millisecond): -1500 * time.Millisecond, start(1500 * time.Millisecond): 1500 * time.Millisecond}
	beyond := map[string]time.Duration{start(2600 * time.Millisecond): 2600 * time.Millisecond, start(-2600 * time.Millisecond): -2600 * time.Millisecond}
	rangeRE := regexp.MustCompile(`puts? its clock between ([+-]?[0-9.]+)s and ([+-]?[0-9.]+)s from Redis's`)
	// line returns the evidence line of url in c, checking that its
	// range holds the true offset.
	line := func(c doctor.Check, url string, off time.Duration) string {
		t.Helper()
		for _, l := range c.Evidence {
			if !strings.HasPrefix(l, url+":") {
				continue
			}
			m := rangeRE.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("%s: no range of offsets in %q", url, l)
			}
			lo, _ := strconv.ParseFloat(m[1], 64)
			hi, _ := strconv.ParseFloat(m[2], 64)
			// The true offset, give or take the two clocks' reads.
			if s := off.Seconds(); s < lo-0.005 || s > hi+0.005 {
				t.Errorf("%s, %v off: range %s to %s does not hold it: %q", url, off, m[1], m[2], l)
			}
			return l
		}
		t.Fatalf("no evidence line for %s in %q", url, c.Evidence)
		return ""
	}
	urls := func(m map[string]time.Duration) []string {
		var u []string
		for k := range m {
			u = append(u, k)
		}
		return u
	}
	for _, phase := range []time.Duration{100 * time.Millisecond, 350 * time.Millisecond, 600 * time.Millisecond, 850 * time.Millisecond} {
		// Start the run at this phase of the second (a schedule, not a
		// wait for an event).
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second + phase).Sub(now))

		rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "dh", Instances: urls(within), RateWindow: -1})
		c := want(t, rep, doctor.GroupClocks, "instances", doctor.Warn, "no clock sync round measured")
		for url, off := range within {
			if l := line(c, url, off); strings.Contains(l, "more than 2s") {
				t.Errorf("phase %v: %v off is said to be more than 2s: %q", phase, off, l)
			}
		}

		rep = runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "dh", Instances: urls(beyond), RateWindow: -1})
		c = want(t, rep, doctor.GroupClocks, "instances", doctor.Fail, "off by more than 2s")
		for url, off := range beyond {
			if l := line(c, url, off); !strings.HasSuffix(l, ": more than 2s off") {
				t.Errorf("phase %v: %v off is not said to be more than 2s: %q", phase, off, l)
			}
		}
	}
}
