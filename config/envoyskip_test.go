package config_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/config"
)

// warnLines returns the log's WARN lines about skipped entries.
func warnLines(logs *logBuffer) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "entries skipped") {
			out = append(out, l)
		}
	}
	return out
}

// TestEnvoyReloaderWarnsOfSkippedEntries: serve --envoy-config reads
// only the .yaml and .yml files directly inside a directory, while
// envoyproxy/ratelimit's loader (and envoy-compat) reads every file
// below it. A migration walk pointed serve at their runtime directory:
// the domains of sub/extra.yaml and of a file named "limits" were unknown
// to serve without a word in its log. It now warns at start, naming each
// entry (not dot files, not a symbolic link to a directory, which theirs
// does not follow either), and again whenever the set changes.
func TestEnvoyReloaderWarnsOfSkippedEntries(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rl.yaml"), envoyDoc("api", 10))
	writeFile(t, filepath.Join(dir, "limits"), envoyDoc("bare", 10))
	writeFile(t, filepath.Join(dir, ".hidden"), "not read by either with dot files ignored")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "extra.yaml"), envoyDoc("extra", 10))
	other := t.TempDir()
	if err := os.Symlink(other, filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}

	logs := &logBuffer{}
	r, err := config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Load().Domains(); len(got) != 1 || got[0] != "api" {
		t.Fatalf("domains %v, want [api]: serve's rule is unchanged", got)
	}
	w := warnLines(logs)
	if len(w) != 1 {
		t.Fatalf("%d warnings at start, want 1; log:\n%s", len(w), logs)
	}
	limits, sub := filepath.Join(dir, "limits"), filepath.Join(dir, "sub")+string(filepath.Separator)
	for _, want := range []string{limits, sub, "envoy-compat", "name it *.yaml"} {
		if !strings.Contains(w[0], want) {
			t.Errorf("start warning lacks %q: %s", want, w[0])
		}
	}
	for _, not := range []string{".hidden", "linked"} {
		if strings.Contains(w[0], not) {
			t.Errorf("start warning names %q: %s", not, w[0])
		}
	}

	// The same set: no second warning.
	if _, err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := len(warnLines(logs)); n != 1 {
		t.Fatalf("%d warnings after a reload that found the same entries, want 1", n)
	}

	// A forced read (SIGHUP) says it again.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Watch(ctx, time.Hour); close(done) }()
	r.CheckNow()
	waitFor(t, "CheckNow to warn again", func() bool { return len(warnLines(logs)) == 2 })
	cancel()
	<-done

	// Another one: warned of again, with all three.
	writeFile(t, filepath.Join(dir, "notes.txt"), "domain: notes\n")
	if _, err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	w = warnLines(logs)
	if len(w) != 3 || !strings.Contains(w[2], filepath.Join(dir, "notes.txt")) || !strings.Contains(w[2], limits) || !strings.Contains(w[2], sub) {
		t.Fatalf("after notes.txt was added: warnings %q", w)
	}

	// All moved or renamed: said once, and no further warning.
	if err := os.Rename(limits, filepath.Join(dir, "limits.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "sub", "extra.yaml"), filepath.Join(dir, "extra.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "sub"), filepath.Join(dir, "notes.txt")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := len(warnLines(logs)); n != 3 {
		t.Fatalf("%d warnings once nothing was skipped, want still 3", n)
	}
	if n := strings.Count(logs.String(), "no entries skipped any more"); n != 1 {
		t.Fatalf(`"no entries skipped any more" logged %d times, want 1`, n)
	}
	if got := r.Load().Domains(); len(got) != 3 {
		t.Fatalf("domains %v after the move, want api, bare and extra", got)
	}

	// A directory holding no .yaml file but others: the error names them.
	bare := t.TempDir()
	writeFile(t, filepath.Join(bare, "limits"), envoyDoc("bare", 10))
	_, err = config.NewEnvoyReloader([]string{bare}, config.ReloaderOptions{Registerer: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(bare, "limits")) || !strings.Contains(err.Error(), "name it *.yaml") {
		t.Fatalf("directory of a file named limits only: error %v", err)
	}
}
