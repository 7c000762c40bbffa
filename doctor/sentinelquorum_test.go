package doctor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// sentinelDo sends one command to the sentinel at addr, as its user
// user (the default user when empty) with password pw, and fails the
// test on an error.
func sentinelDo(t *testing.T, addr, user, pw string, args ...any) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pw, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v on %s: %v", args, addr, err)
	}
}

// sentinelCheckSays asserts that Redis/sentinel's fix says each of fix
// and that its summary and fix say none of not.
func sentinelCheckSays(t *testing.T, c doctor.Check, rep *doctor.Report, fix, not []string) {
	t.Helper()
	for _, x := range fix {
		if !strings.Contains(c.Fix, x) {
			t.Errorf("Redis/sentinel's fix does not say %q:\n%s", x, text(rep))
		}
	}
	for _, x := range not {
		if strings.Contains(c.Summary+"\n"+c.Fix, x) {
			t.Errorf("Redis/sentinel says %q:\n%s", x, text(rep))
		}
	}
}

// TestSentinelCheckWeighsEachQuorum: the sentinel check compares the
// sentinels still monitoring the master with the quorum each of them
// is set to, not only with a majority. A review set quorum 3 on two of
// three sentinels and ran SENTINEL REMOVE on the third: doctor warned
// "2 of 3 still monitor ..., a majority: a failover can still be
// authorized", while with the primary frozen the two logged +sdown and
// never +odown (SENTINEL CKQUORUM passes: the third still answers). It
// now fails, with the fix to monitor it again or lower the quorum; with
// one of the two set to 2 it warns that only that one can start a
// failover; with both at 2 a failover can be authorized again.
func TestSentinelCheckWeighsEachQuorum(t *testing.T) {
	s := redistest.StartSentinel(t)
	a, m := s.SentinelAddrs, s.MasterName
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: m}, Prefix: "sq", RateWindow: -1}
	sentinelDo(t, a[1], "", "", "SENTINEL", "SET", m, "quorum", "3")
	sentinelDo(t, a[2], "", "", "SENTINEL", "SET", m, "quorum", "3")
	sentinelDo(t, a[0], "", "", "SENTINEL", "REMOVE", m)

	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Fail,
		"only 2 of 3 sentinels monitor "+m+", fewer than the quorum 3 they are set to",
		"1 sentinel ("+a[0]+") answers, but monitors no primary named "+m,
		"none of them can judge the primary objectively down", "SENTINEL CKQUORUM passes")
	sentinelCheckSays(t, c, rep,
		[]string{"SENTINEL MONITOR " + m + " <primary ip> <port> <quorum> again on " + a[0] + " ",
			"or lower the quorum on " + a[1] + ", " + a[2], "SENTINEL SET " + m + " quorum 2"},
		[]string{"can still be authorized", "a majority:"})

	// One of the two set to 2: it alone can start a failover.
	sentinelDo(t, a[1], "", "", "SENTINEL", "SET", m, "quorum", "2")
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
		"2 of 3 still monitor "+m+", a majority, but only 1 sentinel is set to a quorum of at most 2 ("+a[1]+"): only it can start a failover",
		"the others' is above 2 ("+a[2]+": quorum 3)")
	sentinelCheckSays(t, c, rep, []string{"lower the quorum on " + a[2], "SENTINEL MONITOR " + m}, []string{"can still be authorized"})

	// Both at 2: a failover can be authorized.
	sentinelDo(t, a[2], "", "", "SENTINEL", "SET", m, "quorum", "2")
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
		"2 of 3 still monitor "+m+", a majority, and no fewer than the quorum 2 they are set to: a failover can still be authorized")
	sentinelCheckSays(t, c, rep, []string{"SENTINEL MONITOR " + m}, []string{"lower the quorum"})
}

// TestSentinelCheckTellsRefusalFromSilence: a sentinel that answers
// doctor's SENTINEL MASTER with a refusal is not called unreachable, nor
// counted as monitoring the master or not. A review set a password on
// one of three sentinels (ACL SETUSER default on >s3cret) and ran doctor
// without one: "a sentinel is unreachable (A): it does not answer", with
// the fix to check its reachability, while its evidence said NOAUTH. It
// now says that the sentinel refuses doctor (NOAUTH) and that doctor
// cannot tell whether it monitors the master, with doctor's sentinel
// credential flags as the fix; a NOPERM names the commands to grant;
// with two of three refusing, the check warns that a majority is not
// known, not that only one sentinel answers.
func TestSentinelCheckTellsRefusalFromSilence(t *testing.T) {
	const pw = "s3cret-doctor-0123456789"
	s := redistest.StartSentinel(t)
	a, m := s.SentinelAddrs, s.MasterName
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: m}, Prefix: "sr", RateWindow: -1}
	locked := []string{a[0]}
	t.Cleanup(func() {
		// Before redistest stops the sentinels: its SHUTDOWN asks no
		// password.
		for _, addr := range locked {
			c := redis.NewClient(&redis.Options{Addr: addr, Password: pw, Protocol: 2, DisableIdentity: true})
			_ = c.Do(context.Background(), "ACL", "SETUSER", "default", "nopass").Err()
			_ = c.Close()
		}
	})
	sentinelDo(t, a[0], "", "", "ACL", "SETUSER", "default", "on", ">"+pw)

	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
		"1 sentinel ("+a[0]+") answers, but refuses doctor (NOAUTH): doctor cannot tell whether it monitors "+m,
		"2 of 3 still monitor "+m+" as far as doctor can see (1 refuses doctor), a majority", a[0]+": answers, but refuses doctor's SENTINEL MASTER "+m+": NOAUTH")
	sentinelCheckSays(t, c, rep, []string{"--redis-sentinel-password-file", "--redis-sentinel-username"},
		[]string{"unreachable", "does not answer", "reachability"})

	// A user without SENTINEL MASTER on that sentinel: NOPERM.
	sentinelDo(t, a[0], "", pw, "ACL", "SETUSER", "doctor", "on", ">"+pw, "+@all", "-sentinel|master")
	for _, addr := range a[1:] {
		sentinelDo(t, addr, "", "", "ACL", "SETUSER", "doctor", "on", ">"+pw, "+@all")
	}
	nopts := opts
	nopts.Redis.SentinelUsername, nopts.Redis.SentinelPassword = "doctor", pw
	rep = runDoctor(t, nopts)
	c = want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
		"1 sentinel ("+a[0]+") answers, but refuses doctor (NOPERM)", "2 of 3 still monitor "+m+" as far as doctor can see")
	sentinelCheckSays(t, c, rep, []string{"+sentinel|master", a[0]}, []string{"unreachable", "does not answer"})

	// Two of three refusing: whether a majority monitors the master is
	// not known; it was "only 1 of 3 sentinels answer".
	locked = append(locked, a[1])
	sentinelDo(t, a[1], "", "", "ACL", "SETUSER", "default", "on", ">"+pw)
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
		"2 sentinels ("+a[0]+", "+a[1]+") answer, but refuse doctor (NOAUTH): doctor cannot tell whether they monitor "+m,
		"1 of 3 still monitor "+m+" as far as doctor can see (2 refuse doctor), not a majority (2) without those refusing doctor")
	sentinelCheckSays(t, c, rep, []string{"--redis-sentinel-password-file"},
		[]string{"only 1 of 3 sentinels answer", "unreachable", "does not answer", "start the missing sentinels"})
}
