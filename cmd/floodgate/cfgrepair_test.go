package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestConfigPushRepairsSameVersionDrift: the repair the docs and the
// instances' refusal give for a stored document of the active version
// that differs only in spacing or in its signature line, "push the file
// again with floodgate config push", works (push refused it: "version
// "24" is already published with different content; bump the version",
// even with --force). The stored bytes become the pushed ones and the
// instance's rejection ends; a same version with other content is still
// refused.
func TestConfigPushRepairsSameVersionDrift(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	url := "redis://" + rs.Addr + "/0"
	prefix := fmt.Sprintf("drift%d", time.Now().UnixNano())
	dir := t.TempDir()
	write := func(name, content string) string {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	doc := func(version string, limit int) string {
		return fmt.Sprintf("version: %q\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: %d, window: 1m, dimension: user}\n", version, limit)
	}
	rawKey := "config-signing-key-0123456789abcdef-drift"
	keyFile := write("key", rawKey+"\n")
	push := func(file string, extra ...string) (int, string) {
		code, out, errOut := cli(append([]string{"config", "push", file, "--redis", url, "--prefix", prefix, "--sign-key-file", keyFile}, extra...)...)
		return code, out + errOut
	}
	signed := func(content string) string {
		s, err := config.Sign([]byte(content), []byte(rawKey))
		if err != nil {
			t.Fatal(err)
		}
		return string(s)
	}
	stored := func() string {
		s, err := client.Get(ctx, prefix+":config").Result()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rejected := func(svc *service) float64 {
		return metricValue(t, svc.url, `floodgate_config_source_rejected{source="policies"}`)
	}

	v24 := write("v24.yaml", doc("24", 24))
	if code, out := push(v24); code != 0 {
		t.Fatalf("first push: %d %s", code, out)
	}
	svc := startService(t, "--redis", url, "--prefix", prefix, "--config-from-redis", "--config-verify-key-file", keyFile,
		"--fallback", "off", "--admin-token", e2eAdminToken)
	if v := adminConfigInfo(t, svc.url).Version; v != "24" {
		t.Fatalf("serve runs version %q, want 24", v)
	}

	// redis-cli set KEY "$(cat FILE)": the final newline dropped, the
	// signature still valid; the instance refuses it.
	for _, force := range []bool{false, true} {
		if err := client.Set(ctx, prefix+":config", strings.TrimSuffix(stored(), "\n"), 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := svc.Signal(syscall.SIGHUP); err != nil { // read it now, not at the next poll
			t.Fatal(err)
		}
		waitUntil(t, "the respaced document to be rejected", func() bool { return rejected(svc) == 1 })
		var extra []string
		if force {
			extra = []string{"--force"}
		}
		code, out := push(v24, extra...)
		if want := `replaced the stored document of version "24", which differed only in spacing or line ends`; code != 0 || !strings.Contains(out, want) {
			t.Fatalf("push of the file again (force %v): %d %s; want 0 and %q", force, code, out, want)
		}
		if got := stored(); got != signed(doc("24", 24)) {
			t.Fatalf("stored after the repair (force %v): %q, want the signed file", force, got)
		}
		waitUntil(t, "the rejection to end", func() bool { return rejected(svc) == 0 })
	}
	// CR LF line ends break the signature line too: the push still
	// recognises its own document, without --force.
	if err := client.Set(ctx, prefix+":config", strings.ReplaceAll(stored(), "\n", "\r\n"), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if code, out := push(v24); code != 0 || !strings.Contains(out, "only in spacing") || stored() != signed(doc("24", 24)) {
		t.Fatalf("push over a CR LF copy: %d %s; stored %q", code, out, stored())
	}

	// Other content under the same version is still refused, forced or not.
	for _, extra := range [][]string{nil, {"--force"}} {
		if code, out := push(write("v24b.yaml", doc("24", 99)), extra...); code != 1 || !strings.Contains(out, "bump the version") {
			t.Fatalf("same version, other content %v: %d %s; want a refusal", extra, code, out)
		}
	}
	if got := stored(); got != signed(doc("24", 24)) {
		t.Fatalf("a refused push changed the stored document to %q", got)
	}

	// An unsigned copy of version 25, written around push: the verifying
	// instance refuses it and stays on 24; push replaces it signed, and
	// the instance applies it.
	v25 := write("v25.yaml", doc("25", 25))
	if err := client.Set(ctx, prefix+":config", doc("25", 25), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the unsigned copy to be rejected", func() bool { return rejected(svc) == 1 })
	code, out := push(v25)
	if want := `replaced the stored document of version "25", which had the same content under another signature line`; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("signed push over an unsigned copy: %d %s; want 0 and %q", code, out, want)
	}
	if got := stored(); got != signed(doc("25", 25)) {
		t.Fatalf("stored after the repair: %q, want the signed file", got)
	}
	waitUntil(t, "version 25 to apply", func() bool { return adminConfigInfo(t, svc.url).Version == "25" })
	if v := rejected(svc); v != 0 {
		t.Fatalf("floodgate_config_source_rejected = %v after the repair, want 0", v)
	}
	// Signed under another key, the same version still needs --force.
	other := write("key.other", "config-signing-key-0123456789abcdef-other\n")
	if code, out, errOut := cli("config", "push", v25, "--redis", url, "--prefix", prefix, "--sign-key-file", other); code != 1 || !strings.Contains(errOut, "signed under another key") {
		t.Fatalf("push signed under another key: %d %s %s; want a refusal", code, out, errOut)
	}
	// Unsigned over signed, likewise.
	if code, out, errOut := cli("config", "push", v25, "--redis", url, "--prefix", prefix); code != 1 || !strings.Contains(errOut, "--force") {
		t.Fatalf("unsigned push over signed: %d %s %s; want a refusal", code, out, errOut)
	}
	svc.stop(t)
}

// TestServeVerifiesWithEveryKey: --config-verify-key-file is repeatable,
// on serve and on doctor, so that instances accept the old key and the
// new while the signing key is rotated (with one key, an instance
// restarted on the new key answered 503 no-configuration until the next
// push); a document signed under a third key is still refused.
func TestServeVerifiesWithEveryKey(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr + "/0"
	prefix := fmt.Sprintf("twokeys%d", time.Now().UnixNano())
	dir := t.TempDir()
	write := func(name, content string) string {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	doc := func(version string) string {
		return fmt.Sprintf("version: %q\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: %s, window: 1m, dimension: user}\n", version, version)
	}
	oldKey := write("key.old", "config-signing-key-0123456789abcdef-old\n")
	newKey := write("key.new", "config-signing-key-0123456789abcdef-new\n")
	thirdKey := write("key.third", "config-signing-key-0123456789abcdef-third\n")
	push := func(version, key string, extra ...string) {
		t.Helper()
		args := append([]string{"config", "push", write("v"+version+".yaml", doc(version)), "--redis", url, "--prefix", prefix, "--sign-key-file", key}, extra...)
		if code, out, errOut := cli(args...); code != 0 {
			t.Fatalf("push of version %s: %d %s %s", version, code, out, errOut)
		}
	}
	doctorPasses := func() {
		t.Helper()
		code, out := runCLI(t, "doctor", "--redis", url, "--prefix", prefix, "--latency-samples", "3",
			"--config-verify-key-file", oldKey, "--config-verify-key-file", newKey)
		if !strings.Contains(out, "[PASS] validates") {
			t.Fatalf("doctor with both keys (exit %d):\n%s", code, out)
		}
	}

	push("1", oldKey)
	// Restarted with both keys while the document is signed with the old.
	svc := startService(t, "--redis", url, "--prefix", prefix, "--config-from-redis",
		"--config-verify-key-file", oldKey, "--config-verify-key-file", newKey, "--fallback", "off", "--admin-token", e2eAdminToken)
	if v := adminConfigInfo(t, svc.url).Version; v != "1" {
		t.Fatalf("serve with both keys runs version %q over a document signed with the old key, want 1", v)
	}
	doctorPasses()
	push("2", newKey, "--force")
	waitUntil(t, "the document signed with the new key to apply", func() bool { return adminConfigInfo(t, svc.url).Version == "2" })
	doctorPasses()
	push("3", thirdKey, "--force")
	waitUntil(t, "the document signed with a third key to be rejected", func() bool {
		return metricValue(t, svc.url, `floodgate_config_source_rejected{source="policies"}`) == 1
	})
	if info := adminConfigInfo(t, svc.url); info.Version != "2" || info.Rejected == nil || !strings.Contains(info.Rejected.Error, "matches none of the 2 verification keys") {
		t.Fatalf("after a push signed with a third key: %+v; want version 2 kept and the rejection", info)
	}
	svc.stop(t)

	// A key file too short is refused at start, naming it.
	short := write("key.short", "short\n")
	code, out := runCLI(t, "serve", "--addr", "127.0.0.1:0", "--redis", url, "--prefix", prefix, "--config-from-redis",
		"--config-verify-key-file", oldKey, "--config-verify-key-file", short)
	if code == 0 || !strings.Contains(out, "--config-verify-key-file "+short+": 5 bytes, want at least 32") {
		t.Fatalf("serve with a short second key: exit %d: %s", code, out)
	}

	code, out = runCLI(t, "serve", "--help")
	if code != 0 || !strings.Contains(out, "--config-verify-key-file stringArray") || !strings.Contains(out, "repeatable") {
		t.Fatalf("serve --help: %d\n%s", code, out)
	}
}

// TestVerifyingServeNamesRespacing: a verifying instance (and doctor
// given its key) refuses a stored copy of its document whose line ends
// were made CR LF, saying that it differs only in spacing or line ends,
// as an instance that does not verify says; it used to blame the
// signature ("malformed signature"). The copy is still refused.
func TestVerifyingServeNamesRespacing(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	url := "redis://" + rs.Addr + "/0"
	prefix := fmt.Sprintf("crlf%d", time.Now().UnixNano())
	dir := t.TempDir()
	write := func(name, content string) string {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	keyFile := write("key", "config-signing-key-0123456789abcdef-crlf\n")
	v7 := write("v7.yaml", "version: \"7\"\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 7, window: 1m, dimension: user}\n")
	if code, out, errOut := cli("config", "push", v7, "--redis", url, "--prefix", prefix, "--sign-key-file", keyFile); code != 0 {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	svc := startService(t, "--redis", url, "--prefix", prefix, "--config-from-redis", "--config-verify-key-file", keyFile,
		"--fallback", "off", "--admin-token", e2eAdminToken)
	stored, err := client.Get(ctx, prefix+":config").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, drift := range []struct{ name, doc string }{
		{"CR LF", strings.ReplaceAll(stored, "\n", "\r\n")},
		{"trailing spaces", strings.ReplaceAll(stored, "\n", "  \n")},
	} {
		if err := client.Set(ctx, prefix+":config", drift.doc, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := svc.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the "+drift.name+" copy to be rejected", func() bool {
			info := adminConfigInfo(t, svc.url)
			return info.Rejected != nil && strings.Contains(info.Rejected.Error, "only in spacing or line ends")
		})
		if info := adminConfigInfo(t, svc.url); info.Version != "7" || strings.Contains(info.Rejected.Error, "signature") {
			t.Fatalf("%s: %+v; want version 7 kept, refused for its spacing", drift.name, info.Rejected)
		}
		code, out := runCLI(t, "doctor", "--redis", url, "--prefix", prefix, "--latency-samples", "3", "--config-verify-key-file", keyFile)
		if !strings.Contains(out, "only in spacing or line ends") || !strings.Contains(out, "floodgate config push FILE") {
			t.Fatalf("%s: doctor (exit %d) does not name the respacing and its repair:\n%s", drift.name, code, out)
		}
	}
	svc.stop(t)
}

// TestDoctorFailsADocumentInstancesRefuse: a stored document of the
// version the instances run, with its final newline dropped, which every
// instance refuses, used to pass Config/validates; doctor now fails it
// from the instances' floodgate_config_source_rejected and names the
// repair, floodgate config push FILE, there and in
// Instances/config-version.
func TestDoctorFailsADocumentInstancesRefuse(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	url := "redis://" + rs.Addr + "/0"
	prefix := fmt.Sprintf("refused%d", time.Now().UnixNano())
	file := filepath.Join(t.TempDir(), "v3.yaml")
	if err := os.WriteFile(file, []byte("version: \"3\"\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 3, window: 1m, dimension: user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli("config", "push", file, "--redis", url, "--prefix", prefix); code != 0 {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	svc := startService(t, "--redis", url, "--prefix", prefix, "--config-from-redis", "--fallback", "off", "--admin-token", e2eAdminToken)
	doctor := func() string {
		_, out := runCLI(t, "doctor", "--redis", url, "--prefix", prefix, "--latency-samples", "3", "--instance", svc.url)
		return out
	}
	if out := doctor(); !strings.Contains(out, "[PASS] validates") {
		t.Fatalf("doctor before the drift:\n%s", out)
	}
	stored, err := client.Get(ctx, prefix+":config").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, prefix+":config", strings.TrimSuffix(stored, "\n"), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the drifted copy to be rejected", func() bool {
		return metricValue(t, svc.url, `floodgate_config_source_rejected{source="policies"}`) == 1
	})
	out := doctor()
	if strings.Contains(out, "[PASS] validates") || !strings.Contains(out, "instance reading it refuses it") ||
		strings.Count(out, "push the file again (floodgate config push FILE)") < 2 {
		t.Fatalf("doctor over a document the instance refuses:\n%s", out)
	}
	svc.stop(t)
}

// TestForcedPushWarnsOfRollback: --force, which a key rotation needs,
// used to let an older version through without a word; push now warns,
// naming both versions.
func TestForcedPushWarnsOfRollback(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr + "/0"
	prefix := fmt.Sprintf("rollback%d", time.Now().UnixNano())
	dir := t.TempDir()
	push := func(version string, extra ...string) (int, string, string) {
		file := filepath.Join(dir, "v"+version+".yaml")
		if err := os.WriteFile(file, []byte("version: \""+version+"\"\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return cli(append([]string{"config", "push", file, "--redis", url, "--prefix", prefix}, extra...)...)
	}
	if code, out, errOut := push("16"); code != 0 {
		t.Fatalf("push 16: %d %s %s", code, out, errOut)
	}
	const warning = `warning: --force published version "12" below the stored "16": instances roll back to it`
	code, out, errOut := push("12", "--force")
	if code != 0 || !strings.Contains(errOut, warning) {
		t.Fatalf("forced push of 12 over 16: %d %s %s; want 0 and %q", code, out, errOut, warning)
	}
	if code, _, errOut := push("17", "--force"); code != 0 || strings.Contains(errOut, "roll back") {
		t.Fatalf("forced push of 17 over 12: %d %s; want no rollback warning", code, errOut)
	}
}
