package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/posix"
)

// readWithin runs read and returns its result, failing the test if it has
// not returned within 5 s (a blocking open of a named pipe never does).
func readWithin(t *testing.T, what string, read func() ([]byte, error)) ([]byte, error) {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := read()
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still blocked after 5s", what)
		return nil, nil
	}
}

// TestReadFileRefusesPipeAtOpen: ReadFile and ReadEnvoyFile, given a
// named pipe with no writer, return the refusal at once: they open without
// blocking and check the opened file. A poll that saw a regular file, then
// read a path swapped for a pipe in between, blocked in os.Open for good (a
// re-walk: the SIGHUP's outcome never logged, later edits never applied).
// The poller's own stat-then-read is run with the swap made between the
// two.
func TestReadFileRefusesPipeAtOpen(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	fifo := filepath.Join(dir, "pipe.yaml")
	link := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(good, []byte("version: \"1\"\npolicies: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	want := link + " is a named pipe: want a regular file"
	swap := func(target string) {
		t.Helper()
		tmp := link + ".tmp"
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, link); err != nil {
			t.Fatal(err)
		}
	}

	for name, read := range map[string]func(string) ([]byte, error){"ReadFile": ReadFile, "ReadEnvoyFile": ReadEnvoyFile} {
		swap(fifo)
		if _, err := readWithin(t, name, func() ([]byte, error) { return read(link) }); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s of a link to a named pipe: %v, want %q", name, err, want)
		}
		swap(good)
		if data, err := readWithin(t, name, func() ([]byte, error) { return read(link) }); err != nil || !strings.HasPrefix(string(data), "version") {
			t.Errorf("%s of a link to a regular file: %q, %v", name, data, err)
		}
	}

	// The poll's stat sees the regular file; the pipe takes its place
	// before the read.
	p := &poller{
		list: func() ([]string, error) { return []string{link}, nil },
		read: func(path string) ([]byte, error) {
			swap(fifo)
			return ReadFile(path)
		},
	}
	_, err := readWithin(t, "poll", func() ([]byte, error) {
		_, _, err := p.poll()
		return nil, err
	})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("poll with a pipe swapped in before the read: %v, want %q", err, want)
	}
	var ce *Error
	if errors.As(err, &ce) {
		t.Errorf("poll: %v is an *Error (content at fault), want an unreadable source", err)
	}
}

// TestNotRegularSaysWhy: the refusal of a path that is not a regular file
// gives the reason that fits it: a directory holds no document; the read
// of a device or a named pipe may never end. A directory was refused
// "since its read may never end".
func TestNotRegularSaysWhy(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.yaml")
	if err := posix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want, not string }{
		{dir, dir + " is a directory: want a regular file (or a symbolic link to one) holding the document", "never end"},
		{"/dev/null", "/dev/null is a device: want a regular file (or a symbolic link to one); it is not read, since its read may never end", ""},
		{fifo, fifo + " is a named pipe: want a regular file (or a symbolic link to one); it is not read, since its read may never end", ""},
	} {
		for name, check := range map[string]func(string) error{
			"RegularFile": RegularFile,
			"ReadFile": func(p string) error {
				_, err := readWithin(t, "ReadFile("+p+")", func() ([]byte, error) { return ReadFile(p) })
				return err
			},
		} {
			err := check(tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.not != "" && strings.Contains(err.Error(), tc.not)) {
				t.Errorf("%s(%s): %v, want %q", name, tc.path, err, tc.want)
			}
		}
	}
}
