package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/buildinfo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestVersionFlag checks that --version prints the stamped version (the
// container image test in deploy/ checks a build stamped with -ldflags).
func TestVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if got, want := strings.TrimSpace(out.String()), "floodgate version "+build.Version; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}

// TestVersionCommand: "floodgate version" prints what --version prints
// (an outside walk found it an unknown command), then the Go release (an
// upgrade walk found only "floodgate version dev" for every plain go
// build).
func TestVersionCommand(t *testing.T) {
	code, out, errOut := cli("version")
	_, flagOut, _ := cli("--version")
	if code != 0 || !strings.HasPrefix(out, flagOut) || errOut != "" {
		t.Fatalf("version: exit %d, stdout %q, stderr %q; want 0 and %q (what --version prints) first", code, out, errOut, flagOut)
	}
	if want := "go version: " + runtime.Version() + "\n"; !strings.Contains(out, want) {
		t.Errorf("version printed %q, want a line %q", out, want)
	}
}

// TestVersionText: "floodgate version" names the revision and its commit
// time when the build knows them, and says when the tree was modified.
func TestVersionText(t *testing.T) {
	const rev = "0505cc7d1a2b3c4d5e6f708192a3b4c5d6e7f809"
	for _, tc := range []struct {
		name string
		b    buildinfo.Info
		want string
	}{
		{"stamped release", buildinfo.Info{Version: "v1.2.3", Revision: rev, Time: "2026-01-02T03:04:05Z", GoVersion: "go1.26.0"},
			"floodgate version v1.2.3\ngo version: go1.26.0\nrevision: " + rev + "\ncommit time: 2026-01-02T03:04:05Z\n"},
		{"modified tree", buildinfo.Info{Version: "v0.0.0-20260102030405-0505cc7d1a2b+dirty", Revision: rev, Time: "2026-01-02T03:04:05Z", Modified: true, GoVersion: "go1.26.0"},
			"floodgate version v0.0.0-20260102030405-0505cc7d1a2b+dirty\ngo version: go1.26.0\nrevision: " + rev + " (modified)\ncommit time: 2026-01-02T03:04:05Z\n"},
		{"no VCS information", buildinfo.Info{Version: "dev", GoVersion: "go1.26.0"},
			"floodgate version dev\ngo version: go1.26.0\n"},
	} {
		if got := versionText("floodgate", tc.b); got != tc.want {
			t.Errorf("%s: versionText printed %q, want %q", tc.name, got, tc.want)
		}
	}
}

// buildInfoLine matches floodgate_build_info in the Prometheus text format,
// every label non-empty.
var buildInfoLine = regexp.MustCompile(`(?m)^floodgate_build_info\{goversion="([^"]+)",revision="([^"]+)",version="([^"]+)"\} 1$`)

// binaryVersion is the version the test binary's "floodgate version"
// prints on its first line.
func binaryVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(binary(t), "version").Output()
	if err != nil {
		t.Fatalf("floodgate version: %v", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	v, ok := strings.CutPrefix(first, "floodgate version ")
	if !ok || v == "" {
		t.Fatalf("floodgate version printed %q", out)
	}
	return v
}

// checkBuildInfo checks that metrics (a /metrics body) has
// floodgate_build_info with non-empty labels, its version label version.
func checkBuildInfo(t *testing.T, metrics, version string) {
	t.Helper()
	m := buildInfoLine.FindStringSubmatch(metrics)
	if m == nil {
		t.Errorf("/metrics has no floodgate_build_info{goversion,revision,version} 1 with non-empty labels:\n%s", metrics)
		return
	}
	if m[3] != version {
		t.Errorf("floodgate_build_info version %q, want %q (what floodgate version prints)", m[3], version)
	}
}

// binaryRevision is the revision the test binary's "floodgate version"
// prints, "" when it prints none.
func binaryRevision(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(binary(t), "version").Output()
	if err != nil {
		t.Fatalf("floodgate version: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "revision: "); ok {
			r, _, _ = strings.Cut(r, " ")
			return r
		}
	}
	return ""
}

// checkListeningBuild checks that rec, a listening line, names the build
// as /readyz and floodgate_build_info do: "version" the version
// "floodgate version" prints, "revision" its revision when it prints one
// (the line had "version":"1", the configuration's version, and no build).
func checkListeningBuild(t *testing.T, rec map[string]string, version, revision string) {
	t.Helper()
	if rec["version"] != version || rec["revision"] != revision {
		t.Errorf("listening line: version %q, revision %q; want %q and %q (what floodgate version prints): %v",
			rec["version"], rec["revision"], version, revision, rec)
	}
}

// TestServeReportsItsBuild: a real serve exports floodgate_build_info and
// names its version in /readyz, as "floodgate version" prints it (an
// upgrade walk could not tell which instance ran which build: neither
// said anything of it); its listening line names it under "version", and
// the configuration's version under "config_version", as /readyz does
// (buildlog: it logged the configuration's as "version").
func TestServeReportsItsBuild(t *testing.T) {
	want := binaryVersion(t)
	cfg := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(cfg, []byte("version: \"cfg-7\"\npolicies:\n  - name: p\n    layers:\n      - {name: u, algorithm: fixed_window, limit: 5, window: 1m, dimension: user}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, "--config", cfg)
	listening, _ := svc.Logged("floodgate listening")
	checkListeningBuild(t, listening, want, binaryRevision(t))
	if listening["config_version"] != "cfg-7" {
		t.Errorf("listening line: config_version %q, want the configuration's %q: %v", listening["config_version"], "cfg-7", listening)
	}
	_, metrics := httpGet(t, svc.url+"/metrics")
	checkBuildInfo(t, metrics, want)
	code, body := readyz(t, svc.url)
	var ready struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || code != 200 {
		t.Fatalf("/readyz: %d %s (%v)", code, body, err)
	}
	if ready.Version != want {
		t.Errorf("/readyz version %q, want %q (what floodgate version prints): %s", ready.Version, want, body)
	}
}

// TestEnvoyCompatReportsItsBuild: envoy-compat's /metrics on its debug
// port exports floodgate_build_info too, and its listening line names the
// build as serve's does (it named none).
func TestEnvoyCompatReportsItsBuild(t *testing.T) {
	want := binaryVersion(t)
	rdb := redistest.Start(t)
	_, rt := compatRuntime(t, compatConfig)
	p := startCompat(t, append(rt, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "CACHE_KEY_PREFIX=bi_")...)
	listening, _ := p.Logged("floodgate envoy-compat listening")
	checkListeningBuild(t, listening, want, binaryRevision(t))
	_, metrics := httpGet(t, "http://"+p.debug+"/metrics")
	checkBuildInfo(t, metrics, want)
}

// TestUnknownCommandsListTheCommands: a mistyped top-level command, like
// one of config or demo, fails naming the commands there are; an unknown
// help topic fails the same way (it printed "Unknown help topic" and the
// usage, and exited 0), at the top and under a group.
func TestUnknownCommandsListTheCommands(t *testing.T) {
	const all = "check, completion, config, demo, doctor, envoy-compat, loadtest, serve, version"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuchcommand"}, `unknown command "nosuchcommand" for "floodgate" (want one of: ` + all + `)`},
		{[]string{"serv"}, `unknown command "serv" for "floodgate" (want one of: ` + all + `): did you mean "serve"?`},
		{[]string{"help", "bogus"}, `unknown help topic "bogus" for "floodgate" (want one of: ` + all + `)`},
		{[]string{"help", "config", "bogus"}, `unknown help topic "bogus" for "floodgate config" (want one of: example, push, validate)`},
		{[]string{"help", "check", "bogus"}, `unknown help topic "bogus": "floodgate check" has no subcommands`},
	} {
		code, out, errOut := cli(tc.args...)
		if code != 1 || out != "" || strings.TrimSpace(errOut) != "floodgate: "+tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1, nothing, and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	// The topics there are still print their help.
	for _, args := range [][]string{{"help"}, {"help", "config"}, {"help", "config", "validate"}} {
		if code, out, errOut := cli(args...); code != 0 || !strings.Contains(out, "Usage:") || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q; want 0 and the help", args, code, errOut)
		}
	}
}
