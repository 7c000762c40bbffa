package doctor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestLargeConfigListsAreCapped: with hundreds of policies and quotas,
// the checks that name them list the first ten and count the rest (a
// 1,000-policy configuration made a 55,887-character evidence line, and
// one sliding-logs check 399 lines).
func TestLargeConfigListsAreCapped(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "256mb", "--maxmemory-policy", "noeviction") // --appendonly no
	var b strings.Builder
	b.WriteString("version: \"big\"\npolicies:\n")
	const n = 25
	for i := range n {
		fmt.Fprintf(&b, `  - name: p%02d
    layers:
      - {name: edge, algorithm: fixed_window, limit: 1000, window: 1m, dimension: global}
      - {name: user, algorithm: sliding_log, limit: 20000, window: 1h, dimension: user}
`, i)
	}
	b.WriteString("quotas:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {name: q%02d, limit: 100, period: month, dimension: api_key}\n", i)
	}
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "bl", ConfigFile: file})
	logs := want(t, rep, doctor.GroupConfig, "sliding-logs", doctor.Warn, "25 sliding-log layers", "p00.user", "p09.user", "… 15 more")
	if got, want := len(logs.Evidence), 11; got != want {
		t.Errorf("sliding-logs evidence: got %d lines, want %d:\n%s", got, want, strings.Join(logs.Evidence, "\n"))
	}
	want(t, rep, doctor.GroupConfig, "hot-keys-and-slots", doctor.Warn, "25 global layers",
		"global layers on one key: p00.edge (limit 1000 per 1m0s); ", "p09.edge (limit 1000 per 1m0s); … 15 more",
		"policies whose layers use different identities: p00: layers keyed by global, user; ", "p09: layers keyed by global, user; … 15 more")
	want(t, rep, doctor.GroupRedis, "persistence", doctor.Fail, "quotas configured: q00, q01, q02, q03, q04, q05, q06, q07, q08, q09, … 15 more")
	for _, c := range rep.Checks {
		for _, e := range c.Evidence {
			if len(e) > 1000 || strings.Contains(e, "p10") || strings.Contains(e, "q10") {
				t.Errorf("%s/%s lists past the tenth: %.200s", c.Group, c.Name, e)
			}
		}
	}
}
