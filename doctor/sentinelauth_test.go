package doctor_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelPasswordPasses: behind sentinels that require a password,
// doctor asks them with the sentinels' password (config.Redis's
// SentinelPassword), as the limiter does; it asked without one, and every
// sentinel answered NOAUTH.
func TestSentinelPasswordPasses(t *testing.T) {
	const pw = "doctor-sentinel-pw-0123456789"
	s := redistest.StartSentinel(t)
	s.RequirePass(t, pw)
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName,
		Password: pw, SentinelPassword: pw}, Prefix: "sp"})
	want(t, rep, doctor.GroupRedis, "sentinel", doctor.Pass, "3 of 3 sentinels")
}

// TestSentinelWrongPrimaryPassword: when the sentinels answer and the
// primary they name refuses doctor's password, Redis/reachable names
// that primary and says it refused the password, and its fix names the
// primary's settings (--redis-password-file, --redis-username), not the
// sentinels'. An outside re-walk (rwsentq) was sent to "the sentinels'
// password", which was right.
func TestSentinelWrongPrimaryPassword(t *testing.T) {
	const pw = "doctor-sentinel-pw-0123456789"
	s := redistest.StartSentinel(t)
	s.RequirePass(t, pw)
	got := unreachable(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelAddrs, SentinelMaster: s.MasterName,
		Password: "wrong", SentinelPassword: pw}, Prefix: "sw"})
	fix := got[strings.LastIndex(got, "\nfix: "):]
	for _, w := range []string{s.Primary.Addr, "WRONGPASS"} {
		if !strings.Contains(got, w) {
			t.Errorf("Redis/reachable says %q, want %q", got, w)
		}
	}
	for _, w := range []string{"--redis-password-file", "--redis-username"} {
		if !strings.Contains(fix, w) {
			t.Errorf("Redis/reachable's fix %q, want %q", fix, w)
		}
	}
	if strings.Contains(fix, "the sentinels' password") || strings.Contains(got, "that primary does not") {
		t.Errorf("Redis/reachable blames the sentinels' password or calls the primary silent: %q", got)
	}
}
