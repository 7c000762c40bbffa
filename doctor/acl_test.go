package doctor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestUserWithoutReadPermission: doctor run as an ACL user that may only
// PING (ACL SETUSER docbad on >pw +ping +hello). The scan warned with
// NOPERM but advised "check every primary's reachability", the key checks
// then passed "every one of 0 keys", the tiers check passed though HLEN
// got NOPERM, and the server check's fix for NOPERM on INFO was to upgrade
// Redis. Each now says what it could not read and gives the reads to grant.
// The fix also offered to "run doctor as the user Floodgate uses", which
// serve's documented ACL user cannot (NOPERM on SCAN, HLEN, LATENCY: a
// walk of ACL users): it gives the grants alone.
func TestUserWithoutReadPermission(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "ap", testConfig)
	traffic(t, client, "ap", cfg)
	if err := client.Do(context.Background(), "ACL", "SETUSER", "docbad", "on", ">pw", "+ping", "+hello").Err(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "fg.yaml")
	if err := os.WriteFile(file, []byte(testConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://docbad:pw@" + srv.Addr}, Prefix: "ap", ConfigFile: file})
	grant := "grant doctor's ACL user these reads: "
	c := want(t, rep, doctor.GroupRedis, "server", doctor.Fail, "NOPERM")
	if !strings.Contains(c.Fix, grant) || strings.Contains(c.Fix, "upgrade") {
		t.Errorf("server fix %q", c.Fix)
	}
	c = want(t, rep, doctor.GroupKeys, "scan", doctor.Warn, "NOPERM")
	if !strings.Contains(c.Fix, grant) || strings.Contains(c.Fix, "reachability") {
		t.Errorf("scan fix %q", c.Fix)
	}
	for _, name := range []string{"ttl", "policies", "sliding-logs"} {
		want(t, rep, doctor.GroupKeys, name, doctor.Warn, "not checked: the scan read no key")
	}
	c = want(t, rep, doctor.GroupConfig, "tiers", doctor.Warn, "HLEN: NOPERM")
	if !strings.Contains(c.Fix, grant) {
		t.Errorf("tiers fix %q", c.Fix)
	}
	for _, c := range rep.Checks {
		if strings.Contains(c.Fix, "run doctor as") {
			t.Errorf("%s/%s: fix %q offers another user than doctor's", c.Group, c.Name, c.Fix)
		}
	}
}

// TestConfigSignedUnderAnotherKey: the stored document is signed, doctor
// is given another key. The verdict was right but the fix was that of a
// syntax error ("fix the errors listed (file:line:column)").
func TestConfigSignedUnderAnotherKey(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	signed, err := config.Sign([]byte(testConfig), []byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, client, "sk", string(signed))
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "sk", VerifyKeys: [][]byte{[]byte(strings.Repeat("x", 32))}})
	c := want(t, rep, doctor.GroupConfig, "validates", doctor.Fail, "signature does not match")
	if strings.Contains(c.Fix, "file:line:column") || !strings.Contains(c.Fix, "--config-verify-key-file") || !strings.Contains(c.Fix, "--sign-key-file") {
		t.Errorf("fix %q", c.Fix)
	}
}

// TestLatencyProbeRefusedWarns: doctor run as an ACL user without EVALSHA
// and EVAL (ACL SETUSER weak on >pw ~* +ping +info +@connection). Redis
// refused the probe script with NOPERM and the latency check failed, with
// the fix "give doctor the password and ACL user Floodgate uses", while
// every other refused read warns with the reads to grant: the latency
// could not be measured, nothing was found wrong. It now warns, and its
// fix names what to grant, as the documented ACL line does.
func TestLatencyProbeRefusedWarns(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	publish(t, client, "lp", testConfig)
	if err := client.Do(context.Background(), "ACL", "SETUSER", "weak", "on", ">pw", "~*", "+ping", "+info", "+@connection").Err(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "fg.yaml")
	if err := os.WriteFile(file, []byte(testConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := runDoctor(t, doctor.Options{Redis: config.Redis{URL: "redis://weak:pw@" + srv.Addr}, Prefix: "lp", ConfigFile: file})
	c := want(t, rep, doctor.GroupRedis, "latency", doctor.Warn, "Redis refused the latency probe", "NOPERM", "evalsha", "the latency is unknown")
	for _, w := range []string{"grant doctor's ACL user these reads: EVALSHA, EVAL and SCRIPT LOAD", "+evalsha +eval +script|load"} {
		if !strings.Contains(c.Fix, w) {
			t.Errorf("latency fix %q does not say %q", c.Fix, w)
		}
	}
	if strings.Contains(c.Fix, "password") || strings.Contains(c.Fix, "run doctor as") || strings.Contains(c.Summary, "failed:") {
		t.Errorf("latency: %q, fix %q", c.Summary, c.Fix)
	}
}
