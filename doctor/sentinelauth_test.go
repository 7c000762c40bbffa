package doctor_test

import (
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
