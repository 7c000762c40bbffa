package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/filestamp"
)

// stamp is what a poll saw of one file: enough to notice that it changed
// without reading it. info identifies the file itself (device and inode),
// so that another file put in its place, by a rename or by swapping the
// symbolic link it is reached through, counts as a change even when it has
// the same size and modification time (files with a fixed time, such as
// Nix store paths or unpacked archives, or a copy made with cp -p).
type stamp struct {
	path string
	at   filestamp.Stamp // size, modification and status change times
	info os.FileInfo
}

// file is one read file of a watched set.
type file struct {
	path string
	data []byte
}

// poller notices changes to a set of files by polling their modification
// times and sizes, and reads them only when those changed. Callers compare
// content hashes to skip rewrites of the same bytes. It is not safe for
// concurrent use.
type poller struct {
	// list returns the files to watch, in a stable order.
	list func() ([]string, error)
	// read reads one file, bounding its size.
	read func(path string) ([]byte, error)
	// invalid reports a read error that is the file's content's fault
	// (it is larger than read allows): the file was read, so the poll
	// returns it as an *invalidFile, once per change of the files, rather
	// than as an unreadable source on every poll. Nil: none is.
	invalid func(error) bool
	last    []stamp // nil until a poll read every file
}

// invalidFile is a poll's error for a file that was read but can never be
// valid (see poller.invalid). Reloaders count it as result="invalid", as
// they count content that fails to parse.
type invalidFile struct{ err error }

func (e *invalidFile) Error() string { return e.err.Error() }
func (e *invalidFile) Unwrap() error { return e.err }

// poll returns the files' contents and true when any file was added,
// removed, replaced by another file, or changed its modification time,
// size or (on Linux) status change time since the last successful poll:
// the last catches a rewrite in place that keeps the size and puts the
// old modification time back (cp -p, rsync --inplace -t). A file that is
// not a regular file once symbolic links are followed (a named pipe, a
// device, a directory) is never read, since its read may never end: it
// fails the poll as an unreadable one does. read must refuse one too
// (ReadFile and ReadEnvoyFile do, checking the file they opened): one may
// take the file's place between the stat and the read. A failure to list, stat or read
// returns the error and makes the next poll read everything again, but for
// a file whose content is at fault (see invalid): that returns an
// *invalidFile and true, and the next poll reads again only once the files
// change.
func (p *poller) poll() ([]file, bool, error) {
	paths, err := p.list()
	if err != nil {
		p.last = nil
		return nil, false, err
	}
	stamps := make([]stamp, len(paths))
	for i, path := range paths {
		fi, err := statRegular(path)
		if err != nil {
			p.last = nil
			return nil, false, err
		}
		stamps[i] = stamp{path: path, at: filestamp.Of(fi), info: fi}
	}
	if p.last != nil && sameStamps(p.last, stamps) {
		return nil, false, nil
	}
	files := make([]file, len(paths))
	for i, path := range paths {
		data, err := p.read(path)
		if err != nil {
			if p.invalid != nil && p.invalid(err) {
				p.last = stamps
				return nil, true, &invalidFile{err: err}
			}
			p.last = nil
			return nil, false, err
		}
		files[i] = file{path: path, data: data}
	}
	p.last = stamps
	return files, true, nil
}

func sameStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].path != b[i].path || !a[i].at.Equal(b[i].at) || !os.SameFile(a[i].info, b[i].info) {
			return false
		}
	}
	return true
}

// WatchFile polls path every interval (default 1s) and reads it whenever
// its modification time or size changes or another file takes its place
// (a rename, a symbolic link swapped); it applies what it read when the
// content hash differs. It returns
// when ctx ends. A file that disappears or turns invalid leaves the last
// good configuration active; fixing the file applies it.
func (r *Reloader) WatchFile(ctx context.Context, path string, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	p := &poller{list: func() ([]string, error) { return []string{path}, nil }, read: ReadFile, invalid: isConfigError}
	lastSum, lastErr := r.holder.Load().Hash(), ""
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.now:
			// Read the file whatever its stamp says, and judge it again
			// against the active configuration: a document rejected
			// before is rejected (and logged) again. lastSum stays what
			// the last read found: set to the active hash here, it
			// outlived a read that failed, and the active document
			// coming back was then skipped as seen, its rejection kept.
			p.last, forced = nil, true
		}
		files, changed, err := p.poll()
		var bad *invalidFile
		if errors.As(err, &bad) {
			r.readable(&lastErr, path)
			lastSum = "" // the file changed: read it whole again when it does
			r.reject(path, bad.err)
			continue
		}
		if err != nil {
			r.sourceError(&lastErr, path, err, forced)
			continue
		}
		if !changed {
			continue
		}
		r.readable(&lastErr, path)
		sum := hashOf(files[0].data)
		switch {
		case forced && sum == r.holder.Load().Hash():
			r.unchanged(path)
		case forced || sum != lastSum:
			_, _ = r.Apply(files[0].data, path)
		}
		lastSum = sum
	}
}

// EnvoyFiles returns the descriptor files serve --envoy-config reads for
// paths: each path that is a file, and the .yaml and .yml files directly
// inside each directory (sorted; names starting with a dot skipped). A
// directory without any is an error, and so is a file named twice.
// skipped lists the other entries of those directories that
// envoyproxy/ratelimit's loader (and floodgate envoy-compat) would read
// but serve does not (see EnvoySkipped).
func EnvoyFiles(paths []string) (files, skipped []string, err error) { return yamlFiles(paths) }

// EnvoySkipped is the warning for the entries EnvoyFiles skipped: what
// serve does with them, what envoyproxy/ratelimit and envoy-compat do,
// and how to make serve read them.
const EnvoySkipped = "entries skipped: serve --envoy-config reads only the .yaml and .yml files directly inside a directory, " +
	"while envoyproxy/ratelimit and floodgate envoy-compat read every file below it, subdirectories and other names too; " +
	"serve does not know the domains these define and answers INVALID_ARGUMENT (unknown domain) for them, which an Envoy with failure_mode_deny false lets through unlimited. " +
	"To have serve read one, move it directly into the directory and name it *.yaml (or give it as its own --envoy-config); " +
	"to silence this, remove it or start its name with a dot"

// yamlFiles returns the files paths name: each path that is a file, and
// the .yaml and .yml files directly inside each path that is a directory
// (sorted, skipping names that start with a dot, such as editors' swap
// files and the "..data" links of a Kubernetes ConfigMap volume). A
// directory without any is an error, and so is a file named twice.
// skipped lists, sorted, each directory's other entries that
// envoyproxy/ratelimit's runtime loader would read: its subdirectories
// (named with a trailing "/") and its files with another name.
func yamlFiles(paths []string) (out, skipped []string, err error) {
	seen := map[string]bool{}
	for _, path := range paths {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, nil, err
		}
		names := []string{path}
		if fi.IsDir() {
			var other []string
			if names, other, err = yamlInDir(path); err != nil {
				return nil, nil, err
			}
			skipped = append(skipped, other...)
		}
		for _, n := range names {
			clean := filepath.Clean(n)
			if seen[clean] {
				return nil, nil, fmt.Errorf("%s is given twice", n)
			}
			seen[clean] = true
			out = append(out, n)
		}
	}
	return out, skipped, nil
}

// yamlInDir returns the .yaml and .yml files directly inside dir, and
// the entries skipped that envoyproxy/ratelimit's loader would read:
// subdirectories (it walks into them, but not through a symbolic link)
// and files with another name. Names starting with a dot are neither.
// A .yaml or .yml entry that cannot be read is an error naming it (a
// dangling symbolic link as such: a ConfigMap's file whose "..data" link
// is gone), and so is one that is not a regular file once symbolic links
// are followed (a named pipe, a device: RegularFile's error) but for a
// symbolic link to a directory, which is not listed; one removed while
// dir is read is not listed.
func yamlInDir(dir string) (names, skipped []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		full := filepath.Join(dir, n)
		if e.IsDir() {
			skipped = append(skipped, full+string(filepath.Separator))
			continue
		}
		isYAML := strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")
		// Stat follows symbolic links, as a ConfigMap volume needs.
		fi, err := os.Stat(full)
		if err != nil && isYAML && e.Type()&fs.ModeSymlink != 0 && errors.Is(err, fs.ErrNotExist) {
			if _, lerr := os.Lstat(full); lerr == nil {
				target, _ := os.Readlink(full)
				return nil, nil, fmt.Errorf("%s is a dangling symbolic link: its target %s does not exist", full, target)
			}
		}
		if err != nil && isYAML && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		if err != nil {
			continue
		}
		if isYAML && !fi.IsDir() && !fi.Mode().IsRegular() {
			// A named pipe, a device or a socket: refused unread, as a
			// --config, not skipped, which dropped its domains.
			return nil, nil, notRegular(full, fi)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if !isYAML {
			skipped = append(skipped, full)
			continue
		}
		names = append(names, full)
	}
	sort.Strings(skipped)
	if len(names) == 0 {
		if len(skipped) > 0 {
			return nil, nil, fmt.Errorf("directory %s holds no .yaml or .yml file directly inside (%s: %s)", dir, strings.Join(skipped, ", "), EnvoySkipped)
		}
		return nil, nil, fmt.Errorf("directory %s holds no .yaml or .yml file", dir)
	}
	sort.Strings(names)
	return names, skipped, nil
}
