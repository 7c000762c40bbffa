package envoycompat

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-rl/floodgate/internal/posix"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(files []File) string {
	var s []string
	for _, f := range files {
		s = append(s, f.Name)
	}
	return strings.Join(s, " ")
}

// TestRuntimeLayout follows their runtime loader: keys are paths with "/"
// as "."; with RUNTIME_WATCH_ROOT only keys under the app directory count;
// RUNTIME_IGNOREDOTFILES skips dot files and directories (a ConfigMap's
// "..data"); links to directories are not followed.
func TestRuntimeLayout(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "v1")
	write(t, filepath.Join(data, "rl", "config", "a.yaml"), "a")
	write(t, filepath.Join(data, "rl", "config", "sub", "b.yml"), "b")
	write(t, filepath.Join(data, "rl", "config", ".hidden.yaml"), "h")
	write(t, filepath.Join(data, "rl", "config", "..2026_12_01", "c.yaml"), "c")
	write(t, filepath.Join(data, "rl", "other", "x.yaml"), "x")
	if err := os.Symlink("..2026_12_01", filepath.Join(data, "rl", "config", "..data")); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(root, "current")
	if err := os.Symlink(data, current); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rt   Runtime
		want string
	}{
		{Runtime{Root: current, Subdirectory: "rl", AppDirectory: "config", WatchRoot: true},
			"config...2026_12_01.c.yaml config..hidden.yaml config.a.yaml config.sub.b.yml"},
		{Runtime{Root: current, Subdirectory: "rl", AppDirectory: "config", WatchRoot: true, IgnoreDotFiles: true},
			"config.a.yaml config.sub.b.yml"},
		{Runtime{Root: current, Subdirectory: "rl", AppDirectory: "config", IgnoreDotFiles: true},
			"a.yaml sub.b.yml"},
	} {
		files, err := tc.rt.Files()
		if err != nil {
			t.Fatal(err)
		}
		if got := names(files); got != tc.want {
			t.Errorf("%+v: files %q, want %q", tc.rt, got, tc.want)
		}
	}
	var noDir *noDirError
	if files, err := (Runtime{Root: root, Subdirectory: "missing", AppDirectory: "config"}).Files(); !errors.As(err, &noDir) {
		t.Errorf("missing directory: files %q, error %v; want a *noDirError", names(files), err)
	}
}

// TestRuntimeSignature: with RUNTIME_WATCH_ROOT a reload follows only the
// replacement of the root link; without it, any change of the files.
func TestRuntimeSignature(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "v1", "rl", "config", "a.yaml"), "a")
	write(t, filepath.Join(root, "v2", "rl", "config", "a.yaml"), "b")
	current := filepath.Join(root, "current")
	if err := os.Symlink(filepath.Join(root, "v1"), current); err != nil {
		t.Fatal(err)
	}
	watch := Runtime{Root: current, Subdirectory: "rl", AppDirectory: "config", WatchRoot: true}
	dir := Runtime{Root: current, Subdirectory: "rl", AppDirectory: "config"}
	w0, d0 := watch.Signature(), dir.Signature()
	write(t, filepath.Join(root, "v1", "rl", "config", "a.yaml"), "edited in place")
	if watch.Signature() != w0 {
		t.Error("watch-root signature changed on an edit inside the tree")
	}
	if dir.Signature() == d0 {
		t.Error("directory signature unchanged after an edit")
	}
	// A rewrite in place keeping the size and putting the old time back
	// (cp -p or rsync --inplace -t over the file): found by a walk beside
	// envoyproxy/ratelimit, which reloaded it while the signature missed it.
	a := filepath.Join(root, "v1", "rl", "config", "a.yaml")
	fi, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	d1 := dir.Signature()
	time.Sleep(20 * time.Millisecond)
	write(t, a, "EDITED IN PLACE")
	if err := os.Chtimes(a, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" && dir.Signature() == d1 {
		t.Error("directory signature unchanged after a rewrite in place with the old size and time")
	}
	tmp := filepath.Join(root, "next")
	if err := os.Symlink(filepath.Join(root, "v2"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	if watch.Signature() == w0 {
		t.Error("watch-root signature unchanged after the root link was replaced")
	}
}

// TestRuntimeOversizedFile: a file above MaxFileSize refuses the
// configuration, naming the file and the limit; the error does not give a
// size, since only one byte past the limit is read (it said "file is
// 4194305 bytes" of a 4.4 MB file).
func TestRuntimeOversizedFile(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "rl", "config", "big.yaml"), "domain: d\n"+strings.Repeat("#", MaxFileSize+200_000))
	files, err := Runtime{Root: root, Subdirectory: "rl", AppDirectory: "config"}.Files()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(files, false)
	if err == nil || !strings.Contains(err.Error(), "big.yaml: file is larger than 4194304 bytes") {
		t.Fatalf("Load of a %d-byte file: %v, want it refused as larger than %d bytes", MaxFileSize+200_010, err, MaxFileSize)
	}
}

// newMemService returns a Service on a MemoryStore and its Metrics, on a
// registry of its own.
func newMemService(t *testing.T) (*Service, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(Options{Store: &MemoryStore{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return svc, m
}

// TestReloaderWarnsWithoutFiles: a runtime directory that holds no
// descriptor file (or does not exist) loads an empty configuration, as
// theirs, and says so at warning level with the directory it looked in;
// it used to log only "Successfully loaded new configuration".
func TestReloaderWarnsWithoutFiles(t *testing.T) {
	var logs bytes.Buffer
	svc, m := newMemService(t)
	missing := filepath.Join(t.TempDir(), "nope")
	rl := &Reloader{Runtime: Runtime{Root: missing, Subdirectory: "ratelimit"}, Service: svc, Metrics: m,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := rl.Load(); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "no descriptor files found") || !strings.Contains(out, missing) {
		t.Errorf("log %q: want a warning naming %s", out, missing)
	}
}

// TestReloaderRejectedWithNoneInForce: a configuration rejected when none
// was loaded yet (at start) is logged as leaving no configuration in
// force, where it used to say "keeping the one in force" of one that did
// not exist; once one is loaded, a rejected one keeps it, and says so.
func TestReloaderRejectedWithNoneInForce(t *testing.T) {
	var logs bytes.Buffer
	svc, m := newMemService(t)
	root := t.TempDir()
	file := filepath.Join(root, "ratelimit", "config", "edge.yaml")
	write(t, file, "domain: edge\ndescriptors:\n  - key: a\n    value: 1.5\n")
	rl := &Reloader{Runtime: Runtime{Root: root, Subdirectory: "ratelimit"}, Service: svc, Metrics: m,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	const none = "no configuration in force: every request is answered with an error until a valid one is loaded"
	if err := rl.Load(); err == nil {
		t.Fatal("Load of an invalid configuration: no error")
	}
	if out := logs.String(); !strings.Contains(out, "Error loading new configuration; "+none) || strings.Contains(out, "keeping the one in force") {
		t.Errorf("log at start %q: want %q, not that one is kept", out, none)
	}
	write(t, file, "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	if err := rl.Load(); err != nil {
		t.Fatalf("Load of a valid configuration: %v", err)
	}
	logs.Reset()
	write(t, file, "domain: edge\ndescriptors:\n  - key: a\n    value: 1.5\n")
	if err := rl.Load(); err == nil {
		t.Fatal("Load of an invalid configuration: no error")
	}
	if out := logs.String(); !strings.Contains(out, "Error loading new configuration; keeping the one in force") || strings.Contains(out, none) {
		t.Errorf("log after a good one %q: want that it is kept", out)
	}
}

// TestReloaderRejectedGauge: floodgate_envoy_config_rejected is 0 from the
// start, 1 after a failed load (at start-up too, with none in force) and 0
// after one that succeeds; after a rejection, the files in force put back
// clear it without being applied again or counted as a load, and the log
// says so.
func TestReloaderRejectedGauge(t *testing.T) {
	var logs bytes.Buffer
	svc, m := newMemService(t)
	root := t.TempDir()
	file := filepath.Join(root, "ratelimit", "config", "edge.yaml")
	const (
		bad   = "domain: edge\ndescriptors:\n  - key: a\n    value: 1.5\n"
		good  = "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
		newer = "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 6}\n"
	)
	rl := &Reloader{Runtime: Runtime{Root: root, Subdirectory: "ratelimit"}, Service: svc, Metrics: m,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	check := func(step string, rejected, success, failed float64) {
		t.Helper()
		if got := testutil.ToFloat64(m.configRejected); got != rejected {
			t.Errorf("%s: floodgate_envoy_config_rejected = %v, want %v", step, got, rejected)
		}
		if got := testutil.ToFloat64(m.configLoad.WithLabelValues(configLoadSuccess)); got != success {
			t.Errorf("%s: loads succeeded = %v, want %v", step, got, success)
		}
		if got := testutil.ToFloat64(m.configLoad.WithLabelValues(configLoadError)); got != failed {
			t.Errorf("%s: loads failed = %v, want %v", step, got, failed)
		}
	}
	check("before any load", 0, 0, 0)
	write(t, file, bad)
	_ = rl.Load()
	check("started with a bad file", 1, 0, 1)
	write(t, file, good)
	if err := rl.Load(); err != nil {
		t.Fatal(err)
	}
	check("fixed", 0, 1, 1)
	active := svc.Config()

	write(t, file, bad)
	_ = rl.Load()
	check("rejected", 1, 1, 2)
	logs.Reset()
	write(t, file, good)
	if err := rl.Load(); err != nil {
		t.Fatal(err)
	}
	check("restored", 0, 1, 2)
	if svc.Config() != active {
		t.Error("restoring the files in force applied them again")
	}
	if out := logs.String(); !strings.Contains(out, "runtime directory holds the configuration in force again") || strings.Contains(out, "Successfully loaded") {
		t.Errorf("log of the restore %q: want that the files in force are back, not a load", out)
	}

	write(t, file, bad)
	_ = rl.Load()
	write(t, file, newer)
	if err := rl.Load(); err != nil {
		t.Fatal(err)
	}
	check("a new file after a rejection", 0, 2, 3)
	if svc.Config() == active {
		t.Error("the new file was not applied")
	}
}

// TestReloaderUnreadableFileKeepsConfig: a descriptor file that cannot be
// read (a ConfigMap's link whose "..data" is gone, a link to a missing
// file) fails the load, naming the file and why: the configuration in
// force stays, the failure is counted and floodgate_envoy_config_rejected
// is 1, and the directory holding the files in force again says so. The
// file used to be skipped silently: its domains were answered OK without
// a limit after "Successfully loaded new configuration" with the others.
// At start, such a file leaves no configuration in force.
func TestReloaderUnreadableFileKeepsConfig(t *testing.T) {
	var logs bytes.Buffer
	svc, m := newMemService(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	write(t, filepath.Join(dir, "..2026_12_06", "first.yaml"), "domain: first\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	write(t, filepath.Join(dir, "..2026_12_06", "second.yaml"), "domain: second\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	write(t, filepath.Join(dir, "other.yaml"), "domain: other\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	for _, l := range [][2]string{{"..2026_12_06", "..data"}, {"..data/first.yaml", "first.yaml"}, {"..data/second.yaml", "second.yaml"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	rl := &Reloader{Runtime: Runtime{Root: root, Subdirectory: "ratelimit", AppDirectory: "config", IgnoreDotFiles: true},
		Service: svc, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := rl.Load(); err != nil {
		t.Fatal(err)
	}
	active := svc.Config()
	if got := strings.Join(active.Domains(), " "); got != "first other second" {
		t.Fatalf("domains %q", got)
	}

	// second.yaml now points at a file that does not exist.
	if err := os.Remove(filepath.Join(dir, "second.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/missing.yaml", filepath.Join(dir, "second.yaml")); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	err := rl.Load()
	if err == nil || !strings.Contains(err.Error(), "second.yaml") || !strings.Contains(err.Error(), "dangling symbolic link") ||
		!strings.Contains(err.Error(), "..data/missing.yaml") {
		t.Errorf("Load with a dangling link: %v, want an error naming second.yaml as a dangling link to ..data/missing.yaml", err)
	}
	if svc.Config() != active {
		t.Error("the configuration in force changed")
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "keeping the one in force") ||
		!strings.Contains(out, "second.yaml") || strings.Contains(out, "Successfully loaded") {
		t.Errorf("log %q: want an error naming second.yaml, keeping the one in force", out)
	}
	if got := testutil.ToFloat64(m.configRejected); got != 1 {
		t.Errorf("floodgate_envoy_config_rejected = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.configLoad.WithLabelValues(configLoadError)); got != 1 {
		t.Errorf("loads failed = %v, want 1", got)
	}

	// The ConfigMap's data gone: every link dangles.
	if err := os.Remove(filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := rl.Load(); err == nil || !strings.Contains(err.Error(), "first.yaml") {
		t.Errorf("Load with ..data gone: %v, want an error naming first.yaml", err)
	}
	if svc.Config() != active {
		t.Error("the configuration in force changed")
	}

	// Put back: the files in force again.
	if err := os.Symlink("..2026_12_06", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "second.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/second.yaml", filepath.Join(dir, "second.yaml")); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	if err := rl.Load(); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "runtime directory holds the configuration in force again") {
		t.Errorf("log of the restore %q", out)
	}
	if got := testutil.ToFloat64(m.configRejected); got != 0 {
		t.Errorf("floodgate_envoy_config_rejected = %v after the restore, want 0", got)
	}

	// At start: none in force.
	if err := os.Remove(filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	svc2, m2 := newMemService(t)
	rl2 := &Reloader{Runtime: rl.Runtime, Service: svc2, Metrics: m2, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := rl2.Load(); err == nil || svc2.Config() != nil {
		t.Errorf("Load at start with dangling links: %v, configuration %v; want an error and none in force", err, svc2.Config())
	}
}

// TestRuntimeSkipsLinksToDirectories: a symbolic link to a directory (a
// ConfigMap's "..data" read without RUNTIME_IGNOREDOTFILES) is still
// skipped, not an unreadable file.
func TestRuntimeSkipsLinksToDirectories(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	write(t, filepath.Join(dir, "..v1", "a.yaml"), "a")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	files, err := Runtime{Root: root, AppDirectory: "config"}.Files()
	if err != nil {
		t.Fatal(err)
	}
	if got := names(files); got != "..v1.a.yaml" {
		t.Errorf("files %q", got)
	}
}

// TestRuntimeCheck: with RUNTIME_WATCH_ROOT=false a runtime directory
// that does not exist is refused at start, naming it and the settings
// (theirs panics: unable to watch file); with RUNTIME_WATCH_ROOT=true it
// is not, as theirs watches RUNTIME_ROOT's parent.
func TestRuntimeCheck(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "rt", "config", "a.yaml"), "a")
	if err := (Runtime{Root: filepath.Join(root, "rt"), AppDirectory: "config"}).Check(); err != nil {
		t.Errorf("existing directory: %v", err)
	}
	missing := Runtime{Root: filepath.Join(root, "rt"), Subdirectory: "nonexist", AppDirectory: "config"}
	err := missing.Check()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "rt", "nonexist", "config")) ||
		!strings.Contains(err.Error(), `RUNTIME_SUBDIRECTORY="nonexist"`) {
		t.Errorf("missing directory: %v, want an error naming it and RUNTIME_SUBDIRECTORY", err)
	}
	missing.WatchRoot = true
	if err := missing.Check(); err != nil {
		t.Errorf("missing directory with RUNTIME_WATCH_ROOT=true: %v", err)
	}
}

// TestRuntimeRefusesNamedPipe: a named pipe in the runtime directory, or
// a symbolic link to one, fails Files, naming it, without being opened:
// opening it waits for a writer, so that the load, and envoy-compat's
// start or reload, would never end (a cfgfix walk); skipping it (as
// until the fixfifo walk) dropped its domains, answered OK without a
// limit after a load counted a success.
func TestRuntimeRefusesNamedPipe(t *testing.T) {
	for _, name := range []string{"pipe.yaml", "link.yaml"} {
		root := t.TempDir()
		dir := filepath.Join(root, "rl", "config")
		write(t, filepath.Join(dir, "a.yaml"), "domain: d\n")
		fifo := filepath.Join(root, "ff")
		if err := posix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if name == "pipe.yaml" {
			if err := os.Rename(fifo, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Symlink(fifo, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		type result struct {
			files []File
			err   error
		}
		got := make(chan result, 1)
		go func() {
			files, err := Runtime{Root: root, Subdirectory: "rl", AppDirectory: "config"}.Files()
			got <- result{files, err}
		}()
		select {
		case r := <-got:
			want := "cannot read " + name + ": " + filepath.Join(dir, name) + " is a named pipe: want a regular file"
			if r.err == nil || !strings.Contains(r.err.Error(), want) {
				t.Fatalf("Files with %s: %q, %v; want an error %q", name, names(r.files), r.err, want)
			}
		case <-time.After(time.Minute):
			t.Fatal("Files still running after a minute: it opened the named pipe")
		}
	}
}

// TestReadLimitedDoesNotWaitOnPipe: a path that names a named pipe when
// it is opened (swapped in after the directory was listed) is opened
// without waiting for a writer and refused as not a regular file. It was
// checked and then opened again by path, which waited in open for good,
// and with it the reload and envoy-compat's shutdown (an outside
// re-walk: still running 16 s after SIGTERM).
func TestReadLimitedDoesNotWaitOnPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "b.yaml")
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := readLimited(fifo)
		got <- err
	}()
	select {
	case err := <-got:
		if want := fifo + " is a named pipe"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("readLimited of a named pipe: %v, want %q", err, want)
		}
	case <-time.After(10 * time.Second):
		// Unblock the open so that the goroutine ends.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("readLimited still running after 10 s: it waits for a writer")
	}
	file := filepath.Join(t.TempDir(), "a.yaml")
	write(t, file, "domain: d\n")
	if data, err := readLimited(file); err != nil || string(data) != "domain: d\n" {
		t.Fatalf("readLimited of a regular file: %q, %v", data, err)
	}
}

// TestReloaderDirectoryGoneKeepsConfig: a runtime directory that
// disappears once a configuration is in force (removed with
// RUNTIME_WATCH_ROOT=false; RUNTIME_ROOT's link swapped to a directory
// that does not exist with RUNTIME_WATCH_ROOT=true) fails the load: the
// configuration in force stays, the error names the directory, the
// failure is counted and floodgate_envoy_config_rejected is 1; the
// directory back with the files in force ends it, logged at warning
// level (envoy-compat's default LOG_LEVEL). Its disappearance used to
// load an empty configuration counted as a success, under which every
// domain was answered OK without a limit, and the end of a rejection was
// logged at INFO, below the default level. An existing directory with no
// descriptor file still loads an empty configuration.
func TestReloaderDirectoryGoneKeepsConfig(t *testing.T) {
	const good = "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	for _, watchRoot := range []bool{false, true} {
		t.Run(map[bool]string{false: "removed", true: "root link swapped"}[watchRoot], func(t *testing.T) {
			var logs bytes.Buffer
			svc, m := newMemService(t)
			base := t.TempDir()
			write(t, filepath.Join(base, "v1", "ratelimit", "config", "edge.yaml"), good)
			root := filepath.Join(base, "v1")
			rt := Runtime{Root: root, Subdirectory: "ratelimit", AppDirectory: "config", WatchRoot: watchRoot}
			if watchRoot {
				root = filepath.Join(base, "cur")
				if err := os.Symlink("v1", root); err != nil {
					t.Fatal(err)
				}
				rt = Runtime{Root: root, Subdirectory: "ratelimit", AppDirectory: "config", WatchRoot: true}
			}
			dir := filepath.Join(root, "ratelimit", "config")
			if watchRoot {
				dir = filepath.Join(root, "ratelimit")
			}
			rl := &Reloader{Runtime: rt, Service: svc, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))}
			if err := rl.Load(); err != nil {
				t.Fatal(err)
			}
			active := svc.Config()

			var put func()
			if watchRoot {
				swap := func(target string) {
					tmp := filepath.Join(base, "tmp")
					if err := os.Symlink(target, tmp); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(tmp, root); err != nil {
						t.Fatal(err)
					}
				}
				swap("v3") // does not exist
				put = func() { swap("v1") }
			} else {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				put = func() { write(t, filepath.Join(dir, "edge.yaml"), good) }
			}
			logs.Reset()
			if err := rl.Load(); err == nil || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Load with the directory gone: %v, want an error naming %s", err, dir)
			}
			if svc.Config() != active {
				t.Error("the configuration in force was replaced")
			}
			if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "keeping the one in force") || strings.Contains(out, "Successfully loaded") {
				t.Errorf("log %q: want an error keeping the configuration in force", out)
			}
			if got := testutil.ToFloat64(m.configRejected); got != 1 {
				t.Errorf("floodgate_envoy_config_rejected = %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.configLoad.WithLabelValues(configLoadError)); got != 1 {
				t.Errorf("loads failed = %v, want 1", got)
			}

			put()
			logs.Reset()
			if err := rl.Load(); err != nil {
				t.Fatal(err)
			}
			if out := logs.String(); !strings.Contains(out, "level=WARN msg=\"runtime directory holds the configuration in force again\"") {
				t.Errorf("log %q: want the end of the rejection at warning level", out)
			}
			if got := testutil.ToFloat64(m.configRejected); got != 0 {
				t.Errorf("floodgate_envoy_config_rejected = %v after the directory's return, want 0", got)
			}
			if svc.Config() != active {
				t.Error("the files in force were applied again")
			}
		})
	}

	// An existing directory without descriptor files loads an empty
	// configuration, as documented.
	var logs bytes.Buffer
	svc, m := newMemService(t)
	root := t.TempDir()
	file := filepath.Join(root, "ratelimit", "config", "edge.yaml")
	write(t, file, good)
	rl := &Reloader{Runtime: Runtime{Root: root, Subdirectory: "ratelimit", AppDirectory: "config"}, Service: svc, Metrics: m,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := rl.Load(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := rl.Load(); err != nil {
		t.Fatalf("Load of an empty directory: %v", err)
	}
	if !svc.Config().Empty() || !strings.Contains(logs.String(), "no descriptor files found") {
		t.Errorf("empty directory: config empty %v, log %q", svc.Config().Empty(), logs.String())
	}
}

// TestReloaderNamedPipeKeepsConfig: a descriptor file that becomes a named
// pipe (its link swapped to one; with RUNTIME_WATCH_ROOT=true, RUNTIME_ROOT's
// link swapped to a tree holding one) fails the load as a dangling link
// does: the configuration in force stays, the error names the file,
// the failure is counted and floodgate_envoy_config_rejected is 1. At
// start a pipe, even the only file, leaves no configuration in force. The
// fixfifo walk found the pipe skipped: its domain (rl) answered OK without
// a limit after a load counted a success, and a pipe alone loaded an
// empty configuration.
func TestReloaderNamedPipeKeepsConfig(t *testing.T) {
	const rl = "domain: rl\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	const other = "domain: other\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	for _, watchRoot := range []bool{false, true} {
		t.Run(map[bool]string{false: "file link swapped", true: "root link swapped"}[watchRoot], func(t *testing.T) {
			var logs bytes.Buffer
			svc, m := newMemService(t)
			base := t.TempDir()
			fifo := filepath.Join(base, "ff")
			if err := posix.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"v1", "v2"} {
				write(t, filepath.Join(base, v, "ratelimit", "config", "second.yaml"), other)
			}
			write(t, filepath.Join(base, "data", "config.yaml"), rl)
			relink := func(target, path string) {
				tmp := path + ".tmp"
				if err := os.Symlink(target, tmp); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
			}
			config := filepath.Join(base, "v1", "ratelimit", "config", "config.yaml")
			relink(filepath.Join(base, "data", "config.yaml"), config)
			relink(fifo, filepath.Join(base, "v2", "ratelimit", "config", "config.yaml"))
			root := filepath.Join(base, "cur")
			relink("v1", root)
			rt := Runtime{Root: root, Subdirectory: "ratelimit", AppDirectory: "config", WatchRoot: watchRoot}
			r := &Reloader{Runtime: rt, Service: svc, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))}
			if err := r.Load(); err != nil {
				t.Fatal(err)
			}
			active := svc.Config()
			if got := strings.Join(active.Domains(), " "); got != "other rl" {
				t.Fatalf("domains %q", got)
			}

			put := func() { relink(filepath.Join(base, "data", "config.yaml"), config) }
			if watchRoot {
				relink("v2", root)
				put = func() { relink("v1", root) }
			} else {
				relink(fifo, config)
			}
			logs.Reset()
			err := r.Load()
			if want := "config.yaml is a named pipe: want a regular file"; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Load with config.yaml a named pipe: %v, want an error containing %q", err, want)
			}
			if svc.Config() != active {
				t.Error("the configuration in force was replaced")
			}
			if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "keeping the one in force") ||
				!strings.Contains(out, "config.yaml") || strings.Contains(out, "Successfully loaded") {
				t.Errorf("log %q: want an error naming config.yaml, keeping the one in force", out)
			}
			if got := testutil.ToFloat64(m.configRejected); got != 1 {
				t.Errorf("floodgate_envoy_config_rejected = %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.configLoad.WithLabelValues(configLoadError)); got != 1 {
				t.Errorf("loads failed = %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.configLoad.WithLabelValues(configLoadSuccess)); got != 1 {
				t.Errorf("loads succeeded = %v, want 1 (the first)", got)
			}

			put()
			if err := r.Load(); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(m.configRejected); got != 0 {
				t.Errorf("floodgate_envoy_config_rejected = %v once the file is back, want 0", got)
			}
		})
	}

	// At start, a pipe alone: no configuration in force.
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := posix.Mkfifo(filepath.Join(dir, "config.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, m := newMemService(t)
	r := &Reloader{Runtime: Runtime{Root: root, Subdirectory: "ratelimit", AppDirectory: "config"}, Service: svc, Metrics: m,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := r.Load(); err == nil || svc.Config() != nil {
		t.Errorf("Load at start with a named pipe alone: %v, configuration %v; want an error and none in force", err, svc.Config())
	}
}
