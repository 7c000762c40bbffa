package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestConfigPushGuards runs "floodgate config push" where the walk of
// policies in Redis found it silent or unclear: a push over nothing
// stored warns that it compared with nothing (a wiped Redis let a version
// lower than the fleet's through without a word); a push signed with
// another key than the stored document's is refused unless --force (it
// was published, and verifying instances refused it: the fleet split);
// a file that only the signature line takes over the size limit is
// flagged by validate and refused by push naming the signature (push said
// only "document is 1048660 bytes (max 1048576)").
func TestConfigPushGuards(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr + "/0"
	prefix := fmt.Sprintf("guards%d", time.Now().UnixNano())
	dir := t.TempDir()
	write := func(name, content string) string {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	doc := func(version string) string {
		return fmt.Sprintf("version: %q\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n", version)
	}
	good := write("key.good", "config-signing-key-0123456789abcdef-good\n")
	bad := write("key.bad", "config-signing-key-0123456789abcdef-bad!\n")
	push := func(file string, extra ...string) (int, string) {
		code, out, errOut := cli(append([]string{"config", "push", file, "--redis", url, "--prefix", prefix}, extra...)...)
		return code, out + errOut
	}

	v8 := write("v8.yaml", doc("8"))
	code, out := push(v8, "--sign-key-file", good)
	if want := fmt.Sprintf(`warning: no configuration was stored under %s:config: published version "8" without comparing it to another`, prefix); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("first push: %d %s; want a warning containing %q", code, out, want)
	}
	code, out = push(write("v9.yaml", doc("9")), "--sign-key-file", bad)
	if code != 1 || !strings.Contains(out, "signed under another key") || strings.Contains(out, "published") {
		t.Fatalf("push signed with another key: %d %s; want a refusal", code, out)
	}
	if code, out = push(write("v9.yaml", doc("9")), "--sign-key-file", good); code != 0 || strings.Contains(out, "warning") {
		t.Fatalf("push signed with the same key: %d %s", code, out)
	}

	base := doc("10")
	big := write("big.yaml", base+"#"+strings.Repeat("x", config.MaxSize-16-len(base)-2)+"\n")
	code, vout, verr := cli("config", "validate", big)
	if code != 0 || !strings.Contains(vout, "OK") || !strings.Contains(verr, "the signature line adds 100 bytes") {
		t.Fatalf("validate of %d bytes: %d %s %s; want OK with a warning about the signature", config.MaxSize-16, code, vout, verr)
	}
	if code, out = push(big, "--sign-key-file", good); code != 1 || !strings.Contains(out, "the signature line adds 100 bytes to the 1048560 of the file; shorten it by 84 bytes") {
		t.Fatalf("signed push of %d bytes: %d %s", config.MaxSize-16, code, out)
	}
	if _, vout, verr = cli("config", "validate", v8); strings.Contains(vout+verr, "warning") {
		t.Fatalf("validate of a small file warns: %s %s", vout, verr)
	}
}
