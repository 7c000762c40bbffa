package envoycompat

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/filestamp"
	"github.com/floodgate-rl/floodgate/internal/regularfile"
)

// Runtime locates the configuration files as envoyproxy/ratelimit's
// runtime loader does (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY,
// RUNTIME_APPDIRECTORY, RUNTIME_IGNOREDOTFILES, RUNTIME_WATCH_ROOT).
//
// With WatchRoot, every file below Root/Subdirectory whose key starts with
// AppDirectory+"." is read; without it, every file below
// Root/Subdirectory/AppDirectory. A file's key is its path relative to the
// walked directory with "/" replaced by "." (for example
// "config.basic.yaml"). Symbolic links to files are followed, symbolic
// links to directories are not; with IgnoreDotFiles, names starting with
// "." are skipped (set it for Kubernetes ConfigMap volumes, whose "..data"
// directories would otherwise be read as well).
type Runtime struct {
	Root, Subdirectory, AppDirectory string
	IgnoreDotFiles, WatchRoot        bool
}

// RuntimeOf returns the runtime layout the settings name.
func (s Settings) RuntimeOf() Runtime {
	return Runtime{Root: s.RuntimeRoot, Subdirectory: s.RuntimeSubdirectory, AppDirectory: s.RuntimeAppDirectory,
		IgnoreDotFiles: s.RuntimeIgnoreDotFiles, WatchRoot: s.RuntimeWatchRoot}
}

// LogValue shows the layout in a log line as the directory read and the
// settings that choose what is read in it, rather than as a Go struct:
// runtime.dir, runtime.app_directory (the key prefix read, with
// WatchRoot), runtime.ignore_dot_files and runtime.watch_root.
func (r Runtime) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("dir", r.dir())}
	if r.WatchRoot {
		attrs = append(attrs, slog.String("app_directory", r.AppDirectory))
	}
	return slog.GroupValue(append(attrs, slog.Bool("ignore_dot_files", r.IgnoreDotFiles), slog.Bool("watch_root", r.WatchRoot))...)
}

// MaxFiles bounds the files one load reads.
const MaxFiles = 10_000

func (r Runtime) dir() string {
	if r.WatchRoot {
		return filepath.Join(r.Root, r.Subdirectory)
	}
	return filepath.Join(r.Root, r.Subdirectory, r.AppDirectory)
}

// Files reads the configuration files, sorted by key (theirs reads them
// in no fixed order). A missing directory is a *noDirError (Check refuses
// it at start; Reloader.Load reads it as no files until a configuration
// is in force, then as a failed load). A file that cannot be read (a symbolic link whose target
// does not exist, such as a ConfigMap's file after its "..data" link is
// gone; a file or directory not readable) is an error naming it: theirs
// skips it with a warning and loads the rest, which answered its
// domains OK without a limit. So is an entry that is not a regular file
// once symbolic links are followed (a named pipe, a socket, a device;
// a *regularfile.Error), unopened: its domains were dropped without a
// word, and opening a pipe waits for a writer. Symbolic links to
// directories and files removed while the directory is read are skipped.
func (r Runtime) Files() ([]File, error) {
	dir := r.dir()
	var out []File
	err := filepath.Walk(dir, func(path string, info fs.FileInfo, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return &noDirError{dir: dir, err: err}
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil // an entry removed meanwhile
			}
			return fmt.Errorf("cannot read %s: %w", path, err)
		}
		if r.IgnoreDotFiles && strings.HasPrefix(info.Name(), ".") && path != dir {
			if info.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return nil
		}
		key := strings.ReplaceAll(filepath.ToSlash(rel), "/", ".")
		if r.WatchRoot && !strings.HasPrefix(key, r.AppDirectory+".") {
			return nil
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Stat(path)
			if err != nil {
				return unreadable(key, path, err)
			}
			info = target
		}
		if info.IsDir() {
			return nil // a symbolic link to a directory, not walked into
		}
		if err := regularfile.Check(path, info); err != nil {
			return unreadable(key, path, err)
		}
		if len(out) >= MaxFiles {
			return fmt.Errorf("more than %d files below %s", MaxFiles, dir)
		}
		data, err := readLimited(path)
		var nr *regularfile.Error
		if errors.As(err, &nr) && nr.Mode.IsDir() {
			return nil // replaced by a directory since it was listed
		}
		if err != nil {
			return unreadable(key, path, err)
		}
		out = append(out, File{Name: key, Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// noDirError is Files' error for a runtime directory that does not exist
// (removed, or RUNTIME_ROOT a link to a directory that does not exist).
type noDirError struct {
	dir string
	err error
}

func (e *noDirError) Error() string {
	return fmt.Sprintf("runtime directory %s does not exist (removed, or a link on its path points to nothing): %v", e.dir, e.err)
}

func (e *noDirError) Unwrap() error { return e.err }

// unreadable is the error for the file of key at path that could not be
// read (err): it names a dangling symbolic link and its target. It is nil
// when the file is no longer there (removed while the directory was
// read), which is no error: the next poll sees the change.
func unreadable(key, path string, err error) error {
	st, lerr := os.Lstat(path)
	if lerr != nil && errors.Is(lerr, fs.ErrNotExist) {
		return nil
	}
	if lerr == nil && st.Mode()&fs.ModeSymlink != 0 && errors.Is(err, fs.ErrNotExist) {
		target, _ := os.Readlink(path)
		return fmt.Errorf("cannot read %s (%s): it is a dangling symbolic link, its target %s does not exist", key, path, target)
	}
	var nr *regularfile.Error
	if errors.As(err, &nr) {
		return fmt.Errorf("cannot read %s: %w", key, err) // it names path
	}
	return fmt.Errorf("cannot read %s (%s): %w", key, path, err)
}

// Check reports, at start, a runtime directory theirs would refuse to
// watch: with WatchRoot false, RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// RUNTIME_APPDIRECTORY must exist (theirs panics, "unable to watch
// file"); without it every domain would be unknown and answered OK
// without a limit. With WatchRoot, theirs watches the directory holding
// RUNTIME_ROOT and starts without the rest, and so does envoy-compat.
func (r Runtime) Check() error {
	if r.WatchRoot {
		return nil
	}
	dir := r.dir()
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("runtime directory %s (RUNTIME_ROOT=%q, RUNTIME_SUBDIRECTORY=%q, RUNTIME_APPDIRECTORY=%q, RUNTIME_WATCH_ROOT=false) cannot be watched: %w; "+
			"without it no limit would apply; check those settings and the volume mount", dir, r.Root, r.Subdirectory, r.AppDirectory, err)
	}
	return nil
}

// readLimited reads the regular file at path, or its first MaxFileSize+1
// bytes' worth when it is larger. The file is opened once, without
// waiting (regularfile.Open: a named pipe swapped in after the directory
// was read opens at once instead of waiting for a writer), and what was
// opened is checked and read: a path checked and then opened again
// waited in open for good when it named a pipe by then, and with it the
// reload and the shutdown. A path that is not a regular file once opened
// is a *regularfile.Error.
func readLimited(path string) ([]byte, error) {
	f, err := regularfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxFileSize {
		// read enough for Load to report the size
		return make([]byte, MaxFileSize+1), nil
	}
	// A regular file's reads ignore O_NONBLOCK.
	return io.ReadAll(io.LimitReader(f, MaxFileSize+1))
}

// Signature summarises what a reload depends on: with WatchRoot, where the
// Root symbolic link points (theirs reloads only when Root is replaced);
// otherwise the names, sizes, modification times and (on Linux) status
// change times of the files, the last so that a rewrite in place keeping
// the size and the old modification time is seen. A change of signature
// triggers a reload.
func (r Runtime) Signature() string {
	h := sha256.New()
	if r.WatchRoot {
		target, _ := os.Readlink(r.Root)
		st, err := os.Lstat(r.Root)
		fmt.Fprintf(h, "%s\x00", target)
		if err == nil {
			fmt.Fprintf(h, "%d\x00", st.ModTime().UnixNano())
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	dir := r.dir()
	_ = filepath.Walk(dir, func(path string, info fs.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		at := filestamp.Of(info)
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00", path, at.Size, at.Mod.UnixNano(), at.Change)
		if info.Mode()&fs.ModeSymlink != 0 {
			if st, err := os.Stat(path); err == nil {
				at := filestamp.Of(st)
				fmt.Fprintf(h, "%d\x00%d\x00%d\x00", at.Size, at.Mod.UnixNano(), at.Change)
			}
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}

// fileNames returns the keys of files, in order.
func fileNames(files []File) []string {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	return names
}

// filesSum is a hash of files' keys and contents, in order: two reads
// with the same sum hold the same configuration.
func filesSum(files []File) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, b := range [][]byte{[]byte(f.Name), f.Data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
