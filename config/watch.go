package config

import (
	"context"
	"errors"
	"fmt"
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
// old modification time back (cp -p, rsync --inplace -t). A failure to list, stat or read
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
		fi, err := os.Stat(path)
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
func EnvoyFiles(paths []string) ([]string, error) { return yamlFiles(paths) }

// yamlFiles returns the files paths name: each path that is a file, and
// the .yaml and .yml files directly inside each path that is a directory
// (sorted, skipping names that start with a dot, such as editors' swap
// files and the "..data" links of a Kubernetes ConfigMap volume). A
// directory without any is an error, and so is a file named twice.
func yamlFiles(paths []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, path := range paths {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		names := []string{path}
		if fi.IsDir() {
			if names, err = yamlInDir(path); err != nil {
				return nil, err
			}
		}
		for _, n := range names {
			clean := filepath.Clean(n)
			if seen[clean] {
				return nil, fmt.Errorf("%s is given twice", n)
			}
			seen[clean] = true
			out = append(out, n)
		}
	}
	return out, nil
}

func yamlInDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		full := filepath.Join(dir, n)
		// Stat follows symbolic links, as a ConfigMap volume needs.
		if fi, err := os.Stat(full); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		names = append(names, full)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("directory %s holds no .yaml or .yml file", dir)
	}
	sort.Strings(names)
	return names, nil
}
