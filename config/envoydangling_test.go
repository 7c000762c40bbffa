package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/posix"
)

// TestEnvoyDirDanglingLinkIsNamed: a descriptor file of an --envoy-config
// directory that is a dangling symbolic link (a ConfigMap's config.yaml
// after its "..data" link is gone) is named as such, its target with it:
// the error said the directory "holds no .yaml or .yml file", and a
// dangling link beside other files was skipped without a word, its
// domains dropped at the next reload.
func TestEnvoyDirDanglingLinkIsNamed(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "..v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "..v1", "config.yaml"), envoyDoc("a", 5))
	for _, l := range [][2]string{{"..v1", "..data"}, {"..data/config.yaml", "config.yaml"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	er, err := config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := er.Load()
	link := filepath.Join(dir, "config.yaml")
	wantErr := func(step string, err error, target string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), link+" is a dangling symbolic link") || !strings.Contains(err.Error(), target) ||
			strings.Contains(err.Error(), "holds no") {
			t.Errorf("%s: %v, want it to name %s as a dangling link to %s", step, err, link, target)
		}
	}

	if err := os.Remove(filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	_, err = er.Reload()
	wantErr("..data gone", err, "..data/config.yaml")
	if er.Load() != before {
		t.Error("the configuration in force changed")
	}

	// Beside another file, the dangling link is not skipped.
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "b.yaml"), envoyDoc("b", 5))
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/missing.yaml", link); err != nil {
		t.Fatal(err)
	}
	_, err = er.Reload()
	wantErr("beside b.yaml", err, "..data/missing.yaml")
	if er.Load() != before {
		t.Error("the configuration in force changed")
	}
	_, err = config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{})
	wantErr("at start", err, "..data/missing.yaml")
}

// TestEnvoyDirNamedPipeIsRefused: a descriptor file of an --envoy-config
// directory that is a named pipe (b.yaml replaced by one, or a link to
// one) fails the reload, naming it, and the configuration in force stays;
// at start it is refused. The fixfifo walk found it skipped: the reload
// applied the other files without b's domains ("Envoy descriptor
// configuration applied"), and a pipe at start was skipped silently.
func TestEnvoyDirNamedPipeIsRefused(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), envoyDoc("a", 5))
	b := filepath.Join(dir, "b.yaml")
	writeFile(t, b, envoyDoc("b", 5))
	er, err := config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := er.Load()
	fifo := filepath.Join(t.TempDir(), "ff")
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"a named pipe", "a link to a named pipe"} {
		if err := os.Remove(b); err != nil {
			t.Fatal(err)
		}
		if step == "a named pipe" {
			err = posix.Mkfifo(b, 0o600)
		} else {
			err = os.Symlink(fifo, b)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := b + " is a named pipe: want a regular file"
		if _, err := er.Reload(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("b.yaml %s: Reload %v, want an error containing %q", step, err, want)
		}
		if er.Load() != before {
			t.Errorf("b.yaml %s: the configuration in force changed", step)
		}
		if _, err := config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("b.yaml %s at start: %v, want an error containing %q", step, err, want)
		}
	}
}
