package doctor_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelCheckNamesRefusedReads: a sentinel that answers SENTINEL
// MASTER but refuses doctor's ACL user SENTINEL CKQUORUM, SENTINEL
// REPLICAS or INFO sentinel (NOPERM) is not a quorum that cannot be
// reached: the check warns that doctor cannot judge them, naming each
// refused read with its sentinels, and its fix the ACL rules to grant
// on each. A walk gave the sentinels' user no +sentinel|ckquorum: doctor
// failed "the quorum cannot be reached (SENTINEL CKQUORUM fails on 3)"
// with the fix to act on what CKQUORUM says; without +info (read since
// the TILT check) it passed, with "TILT unknown" in its evidence.
func TestSentinelCheckNamesRefusedReads(t *testing.T) {
	const pw = "doctor-perm-pw-0123456789"
	s := redistest.StartSentinel(t)
	a, m := s.SentinelAddrs, s.MasterName
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: m, SentinelUsername: "doctor", SentinelPassword: pw}, Prefix: "pn", RateWindow: -1}
	for _, addr := range a {
		sentinelDo(t, addr, "", "", "ACL", "SETUSER", "doctor", "on", ">"+pw, "+@all", "-sentinel|ckquorum", "-sentinel|replicas", "-info")
	}
	all := a[0] + ", " + a[1] + ", " + a[2]

	t.Run("all three", func(t *testing.T) {
		rep := runDoctor(t, opts)
		c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
			"doctor's sentinel user lacks the permission to run SENTINEL REPLICAS on "+all+", SENTINEL CKQUORUM on "+all+" and INFO sentinel on "+all+" (NOPERM)",
			"doctor cannot judge which replicas are up, whether the quorum can be reached and whether they are in TILT mode there",
			"3 of 3 still monitor "+m+", a majority, and no fewer than the quorum 2")
		sentinelCheckSays(t, c, rep, []string{"ACL SETUSER doctor +sentinel|replicas +sentinel|ckquorum +info on " + all, "--redis-sentinel-username"},
			[]string{"quorum cannot be reached", "act on what SENTINEL CKQUORUM says", "would not be replaced"})
	})

	t.Run("info on one", func(t *testing.T) {
		for _, addr := range a {
			sentinelDo(t, addr, "", "", "ACL", "SETUSER", "doctor", "+sentinel|ckquorum", "+sentinel|replicas", "+info")
		}
		sentinelDo(t, a[0], "", "", "ACL", "SETUSER", "doctor", "-info")
		rep := runDoctor(t, opts)
		c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
			"lacks the permission to run INFO sentinel on "+a[0]+" (NOPERM), so doctor cannot judge whether they are in TILT mode there")
		sentinelCheckSays(t, c, rep, []string{"ACL SETUSER doctor +info on " + a[0] + " "}, []string{"CKQUORUM on", a[1], a[2]})
	})
}
