package doctor_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestRefusedProbeSaysRefused: a Redis that answers the probe NOAUTH or
// WRONGPASS refused it; Redis/reachable's read line said "Redis did not
// answer it" (an outside walk).
func TestRefusedProbeSaysRefused(t *testing.T) {
	const pw = "doctor-refused-pw-0123456789"
	srv := redistest.Start(t)
	// redistest waits for an unauthenticated PING: require the password
	// once the server runs, and drop it before the server stops.
	if err := srv.Client(t).ConfigSet(t.Context(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: pw})
		defer c.Close()
		_ = c.ConfigSet(context.Background(), "requirepass", "").Err()
	})
	for _, step := range []struct {
		name, password, reply string
	}{{"no password", "", "NOAUTH"}, {"wrong password", "wrong", "WRONGPASS"}} {
		t.Run(step.name, func(t *testing.T) {
			rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr, Password: step.password}, Prefix: "rf"})
			c := want(t, rep, doctor.GroupRedis, "reachable", doctor.Fail, step.reply)
			if !strings.Contains(c.Read, "Redis refused it") || strings.Contains(c.Read, "did not answer") {
				t.Errorf("Redis/reachable read %q, want it to say Redis refused the PING", c.Read)
			}
		})
	}
}

// TestMissingConfigFile: a --config file that does not exist has no
// errors to list; Config/validates said "does not validate" and "fix the
// errors listed (file:line:column)" for it (an outside walk). It says the
// file could not be read, and to check the path.
func TestMissingConfigFile(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	path := filepath.Join(t.TempDir(), "nonexist.yaml")
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "mc", ConfigFile: path})
	c := want(t, rep, doctor.GroupConfig, "validates", doctor.Fail, path+" could not be read", "no such file or directory")
	if strings.Contains(c.Fix, "file:line:column") || !strings.Contains(c.Fix, "--config") {
		t.Errorf("validates fix %q: want the path given to --config checked, not errors listed", c.Fix)
	}
}
