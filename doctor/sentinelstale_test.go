package doctor_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelCheckTellsStaleCkquorum: right after a sentinel stops,
// SENTINEL CKQUORUM on the others still counts it usable (until they
// flag it s_down, down-after-milliseconds after its last reply), and
// doctor quoted "OK 3 usable Sentinels" next to its own "a sentinel is
// unreachable". Its evidence now says that count includes every sentinel
// known, doctor cannot reach that one, and why CKQUORUM still counts it;
// with the quorum out of reach, the summary no longer says CKQUORUM
// counts "the sentinels that answer". A down-after-milliseconds of ten
// minutes holds the window open. The summary counts the sentinels that
// answer and monitor the master, naming the unreachable one apart: it
// said "only 2 of 3 sentinels monitor", while the third, stopped, may
// monitor it (a forgotten primary and a refusal keep their own words:
// TestSentinelCheckWeighsEachQuorum, TestSentinelCheckTellsRefusalFromSilence).
func TestSentinelCheckTellsStaleCkquorum(t *testing.T) {
	s := redistest.StartSentinel(t)
	a, m := s.SentinelAddrs, s.MasterName
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: m}, Prefix: "sk", RateWindow: -1}
	for _, addr := range a {
		sentinelDo(t, addr, "", "", "SENTINEL", "SET", m, "down-after-milliseconds", "600000")
	}
	s.Sentinels[2].Stop()
	note := "OK 3 usable Sentinels. Quorum and failover authorization can be reached (it counts every one of the 3 sentinels it knows, itself included, as usable, yet doctor cannot reach " +
		a[2] + ": the sentinels flag one that stops answering s_down, and stop counting it, only down-after-milliseconds (600000 ms here) after its last reply, so this count may still include it)"

	t.Run("quorum 2", func(t *testing.T) {
		rep := runDoctor(t, opts)
		c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn, a[0]+": "+m+" at ", a[1]+": "+m+" at ",
			"2 of 3 answer and still monitor "+m+" (1 unreachable), a majority")
		sentinelCheckSays(t, c, rep, nil, []string{"2 of 3 still monitor"})
		for _, ev := range c.Evidence[:2] {
			if !strings.Contains(ev, note) {
				t.Errorf("evidence %q does not say %q", ev, note)
			}
		}
	})
	t.Run("quorum 3", func(t *testing.T) {
		for _, addr := range a[:2] {
			sentinelDo(t, addr, "", "", "SENTINEL", "SET", m, "quorum", "3")
		}
		rep := runDoctor(t, opts)
		c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Fail, note,
			"only 2 of 3 sentinels answer and monitor "+m+" (1 unreachable), fewer than the quorum 3 they are set to",
			"SENTINEL CKQUORUM passes: it counts every sentinel it knows and has not flagged down, whether they monitor "+m+" or not, and one that stops answering is flagged down only down-after-milliseconds after its last reply")
		sentinelCheckSays(t, c, rep, nil, []string{"it counts the sentinels that answer", "only 2 of 3 sentinels monitor"})
	})
}
