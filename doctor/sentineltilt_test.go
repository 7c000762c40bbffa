package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelCheckReadsTilt: the sentinel check reads each sentinel's
// TILT mode (INFO sentinel), which SENTINEL MASTER does not show. A
// sentinel in TILT reports no primary down to the others and starts no
// failover; its flags are not updated. An earlier walk saw doctor pass
// with every sentinel in TILT, and call a replica down on a TILT
// sentinel's stale flags. TILT is entered for real: SENTINEL DEBUG
// tilt-trigger 1 makes the sentinel's own 100ms timer late enough.
// One of three in TILT warns, naming it, the two others still reaching
// quorum 2; all three fail, none being able to judge the primary down.
func TestSentinelCheckReadsTilt(t *testing.T) {
	s := redistest.StartSentinel(t)
	a, m := s.SentinelAddrs, s.MasterName
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: m}, Prefix: "st", RateWindow: -1}

	tilt(t, a[0])
	rep := runDoctor(t, opts)
	c := want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
		"1 sentinel is in TILT mode ("+a[0]+" (TILT", "until it leaves it, it reports no primary down to the other sentinels, starts no failover",
		"3 of 3 still monitor "+m+", a majority, and 2 of them out of TILT, no fewer than the quorum 2 they are set to: a failover can still be authorized",
		a[0]+": "+m+" at ", "(their flags not judged: in TILT they are not updated)")
	sentinelCheckSays(t, c, rep, []string{"+tilt", "-tilt", "clock"}, []string{"lower the quorum", "no replica"})

	tilt(t, a[1])
	tilt(t, a[2])
	rep = runDoctor(t, opts)
	c = want(t, rep, doctor.GroupRedis, "sentinel", doctor.Fail,
		"no sentinel monitoring "+m+" is out of TILT mode (3 monitor it, set to the quorum 2)", "3 sentinels are in TILT mode",
		"so a failed primary would not be replaced until enough of them leave TILT")
	sentinelCheckSays(t, c, rep, []string{"+tilt"}, []string{"lower the quorum", "can still be authorized"})
}

// tilt puts the sentinel at addr in TILT mode and waits until its INFO
// sentinel says so (sentinel_tilt:1), for up to 10s: with tilt-trigger
// 1 (ms) its timer, run every 100ms, is always late.
func tilt(t *testing.T, addr string) {
	t.Helper()
	sentinelDo(t, addr, "", "", "SENTINEL", "DEBUG", "tilt-trigger", "1")
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		info, err := c.Info(ctx, "sentinel").Result()
		if err == nil && strings.Contains(info, "sentinel_tilt:1") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("sentinel %s did not enter TILT: %v %q", addr, err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestSentinelCheckTiltCkquorum: a sentinel in TILT updates no flag, so
// its SENTINEL CKQUORUM counts the other sentinels as they were when it
// entered TILT. The doctortilt walk: one that had flagged both others
// s_down failed it ("NOQUORUM 1 usable Sentinels"), and doctor failed
// the check ("the quorum cannot be reached (SENTINEL CKQUORUM fails on
// 1)") though the two others, out of TILT, reached quorum 2. The check
// now warns, the TILT named as the cause of that CKQUORUM failure.
// The two others pause their clients (CLIENT PAUSE) for 3s, so the
// first's pings go unanswered past down-after-milliseconds (1000).
func TestSentinelCheckTiltCkquorum(t *testing.T) {
	s := redistest.StartSentinel(t)
	a, m := s.SentinelAddrs, s.MasterName
	opts := doctor.Options{Redis: config.Redis{SentinelAddrs: a, SentinelMaster: m}, Prefix: "st", RateWindow: -1}

	for _, b := range a[1:] {
		sentinelDo(t, b, "", "", "CLIENT", "PAUSE", "3000")
	}
	c := redis.NewSentinelClient(&redis.Options{Addr: a[0], Protocol: 2, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ss, err := c.Sentinels(ctx, m).Result()
		down := 0
		for _, x := range ss {
			if strings.Contains(x["flags"], "s_down") {
				down++
			}
		}
		if err == nil && down == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("sentinel %s did not flag the two others s_down: %v %v", a[0], err, ss)
		case <-time.After(20 * time.Millisecond):
		}
	}
	tilt(t, a[0])
	// The others answer again once their pause ends.
	for _, b := range a[1:] {
		sentinelDo(t, b, "", "", "PING")
	}
	if err := c.CkQuorum(ctx, m).Err(); err == nil || !strings.Contains(err.Error(), "NOQUORUM") {
		t.Fatalf("SENTINEL CKQUORUM on %s (in TILT) = %v, want NOQUORUM", a[0], err)
	}
	rep := runDoctor(t, opts)
	want(t, rep, doctor.GroupRedis, "sentinel", doctor.Warn,
		"1 sentinel is in TILT mode ("+a[0]+" (TILT",
		"SENTINEL CKQUORUM fails on "+a[0]+", in TILT",
		"3 of 3 still monitor "+m+", a majority, and 2 of them out of TILT, no fewer than the quorum 2 they are set to: a failover can still be authorized",
		"NOQUORUM 1 usable Sentinels", "not judged: in TILT it updates no flag")
}
