package config

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/envoyrls"
)

// EnvoyReloader holds the descriptor configuration of the Envoy rate limit
// gRPC API (envoyproxy/ratelimit's YAML format, package envoyrls), read
// from files and directories, and swaps in a new one when they change. The
// files are parsed one by one and merged (envoyrls.MergeConfigs); only when
// every file is valid and the merge succeeds does the new configuration
// replace the active one, in one atomic swap. Otherwise the change is
// logged, counted (floodgate_config_reload_total{source="envoy"}) and the
// last good configuration stays. It is safe for concurrent use.
type EnvoyReloader struct {
	paths   []string
	p       atomic.Pointer[envoyrls.Config]
	log     *slog.Logger
	metrics *reloadMetrics

	mu        sync.Mutex // serialises reloads and guards what follows
	poller    poller
	lastSum   string // hash of the files last applied or rejected
	activeSum string // hash of the files applied
	rejected  bool   // the files last read were rejected
	forced    bool   // the next Reload was asked for (CheckNow): judge and log what it finds
	lastErr   string
	files     []string // the files of the active configuration
	skipped   []string // the entries the last listing skipped (see EnvoyFiles)
	warned    string   // the skipped entries last logged, joined
	listed    bool     // the last poll listed the files (skipped is its)

	now chan struct{} // CheckNow's requests to Watch
}

// NewEnvoyReloader reads the descriptor configuration from paths — files,
// and directories whose .yaml and .yml files are all read (see Watch) —
// and returns a reloader holding it. It fails, wrapping
// envoyrls.ErrInvalidConfig or the file system's error, when any file is
// unreadable or invalid, when the files define a domain twice, or when
// paths is empty.
func NewEnvoyReloader(paths []string, opts ReloaderOptions) (*EnvoyReloader, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no Envoy descriptor configuration file or directory given", ErrInvalid)
	}
	m, err := newReloadMetrics(opts.Registerer, SourceEnvoy, true, false)
	if err != nil {
		return nil, err
	}
	r := &EnvoyReloader{paths: append([]string(nil), paths...), log: opts.Logger, metrics: m, now: make(chan struct{}, 1)}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.poller = poller{list: r.list, read: ReadEnvoyFile, invalid: isEnvoyConfigError}
	files, _, err := r.poller.poll()
	if err != nil {
		return nil, fmt.Errorf("config: Envoy descriptor configuration: %w", err)
	}
	r.warnSkipped(true)
	cfg, err := parseEnvoy(files)
	if err != nil {
		return nil, err
	}
	r.p.Store(cfg)
	r.lastSum = envoySum(files)
	r.activeSum = r.lastSum
	r.files = filePaths(files)
	return r, nil
}

// Load returns the active configuration. Pass it (the method value
// r.Load) to envoyrls.NewService, which calls it for every request.
func (r *EnvoyReloader) Load() *envoyrls.Config { return r.p.Load() }

// Files returns the files the active configuration was read from, in the
// order they were merged.
func (r *EnvoyReloader) Files() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.files...)
}

// Reload checks the files now, as one poll of Watch does: if any was
// added, removed or changed (modification time or size, then content), it
// parses them all and makes the result active if it is valid. It returns
// the configuration active afterwards and the error that kept a change
// from applying (the last good configuration then stays active).
func (r *EnvoyReloader) Reload() (*envoyrls.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A read asked for (CheckNow) is this one, whatever it finds: it
	// does not carry over to a later poll.
	forced := r.forced
	r.forced = false
	files, changed, err := r.poller.poll()
	if r.listed {
		r.warnSkipped(forced)
	}
	var bad *invalidFile
	if errors.As(err, &bad) {
		r.readable()
		r.lastSum = "" // read the files whole again when they change
		r.rejected = true
		r.metrics.count(ResultInvalid)
		r.log.Error("Envoy descriptor configuration rejected; keeping the last good one",
			"paths", r.paths, "error", bad.err, "active_files", r.files)
		return r.p.Load(), bad.err
	}
	if err != nil {
		r.metrics.count(ResultError)
		if msg := err.Error(); msg != r.lastErr || forced {
			r.lastErr = msg
			r.log.Error("Envoy descriptor configuration unreadable; keeping the last good one", "paths", r.paths, "error", err)
		}
		return r.p.Load(), fmt.Errorf("config: Envoy descriptor configuration: %w", err)
	}
	if !changed {
		return r.p.Load(), nil
	}
	r.readable()
	sum := envoySum(files)
	if sum == r.lastSum && !forced {
		return r.p.Load(), nil
	}
	r.lastSum = sum
	if sum == r.activeSum {
		// The files hold what runs (again, after a rejection): nothing
		// changes in force, so it is not counted as applied, as the
		// policies Reloader does not count it.
		switch {
		case r.rejected: // a SIGHUP's forced read too: say the rejection is over
			r.log.Info("Envoy descriptor configuration holds the active configuration again", "files", r.files)
		case forced:
			r.log.Info("Envoy descriptor configuration unchanged", "files", r.files)
		}
		r.rejected = false
		r.metrics.setRejected(false)
		return r.p.Load(), nil
	}
	cfg, err := parseEnvoy(files)
	if err != nil {
		r.rejected = true
		r.metrics.count(ResultInvalid)
		r.log.Error("Envoy descriptor configuration rejected; keeping the last good one",
			"files", filePaths(files), "error", err, "active_files", r.files)
		return r.p.Load(), err
	}
	old := r.p.Swap(cfg)
	r.files, r.activeSum, r.rejected = filePaths(files), sum, false
	r.metrics.count(ResultApplied)
	r.log.Info("Envoy descriptor configuration applied", "files", r.files, "domains", cfg.Domains(),
		"rules", len(cfg.Rules()), "previous_domains", old.Domains())
	return cfg, nil
}

// list lists the files of paths, noting the entries skipped.
func (r *EnvoyReloader) list() ([]string, error) {
	files, skipped, err := yamlFiles(r.paths)
	r.listed = err == nil
	if err == nil {
		r.skipped = skipped
	}
	return files, err
}

// warnSkipped logs the entries the directories hold that serve does not
// read but envoyproxy/ratelimit's loader would (see EnvoyFiles): at
// start, whenever they change, and on a forced read (SIGHUP). A read
// that finds none after one that found some says so once.
func (r *EnvoyReloader) warnSkipped(forced bool) {
	key := strings.Join(r.skipped, "\x00")
	if key == r.warned && !forced {
		return
	}
	switch {
	case len(r.skipped) > 0:
		r.log.Warn("Envoy descriptor configuration: "+EnvoySkipped, "skipped", r.skipped, "paths", r.paths)
	case r.warned != "":
		r.log.Info("Envoy descriptor configuration: no entries skipped any more", "paths", r.paths)
	}
	r.warned = key
}

// readable notes a successful read, setting
// floodgate_config_source_unreadable to 0: after a failed one, it logs
// that the files can be read again, so that the failure's error line has
// an end. A poll after a failed one reads every file (poller.poll), so the
// first successful read after a failure gets here.
func (r *EnvoyReloader) readable() {
	r.metrics.setUnreadable(false)
	if r.lastErr != "" {
		r.lastErr = ""
		r.log.Info("Envoy descriptor configuration readable again", "paths", r.paths)
	}
}

// isEnvoyConfigError reports an error of ReadEnvoyFile that is the file's
// content's fault (too large), not the file system's.
func isEnvoyConfigError(err error) bool {
	var e *envoyrls.ConfigError
	return errors.As(err, &e)
}

// CheckNow makes the running Watch reload at once rather than at its next
// poll, reading every file whatever its modification time and size say,
// as floodgate serve does on SIGHUP. It does not wait; requests made while
// one is pending are merged.
func (r *EnvoyReloader) CheckNow() {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Watch calls Reload every interval (default 1s) until ctx ends, and at
// once after CheckNow. A file
// that disappears, turns unreadable or invalid leaves the last good
// configuration active; fixing it applies it. Directories are listed
// again on every poll, so adding or removing a file in one counts as a
// change.
func (r *EnvoyReloader) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = r.Reload()
		case <-r.now:
			r.mu.Lock()
			// Read every file whatever its stamp says, and judge them
			// again against the active configuration: files rejected
			// before are rejected (and logged) again, unreadable ones
			// logged again. lastSum stays what the last read found: set
			// to the active hash here, it outlived a read that failed,
			// and a later poll logged this request's "unchanged".
			r.poller.last, r.forced = nil, true
			r.mu.Unlock()
			_, _ = r.Reload()
		}
	}
}

// parseEnvoy parses every file and merges them: all valid, or an error.
func parseEnvoy(files []file) (*envoyrls.Config, error) {
	cfgs := make([]*envoyrls.Config, len(files))
	var errs []error
	for i, f := range files {
		c, err := envoyrls.ParseConfig(f.data, f.path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cfgs[i] = c
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return envoyrls.MergeConfigs(cfgs...)
}

// ReadEnvoyFile reads an Envoy descriptor file of at most
// envoyrls.MaxConfigSize bytes, as EnvoyReloader does; a larger one is an
// *envoyrls.ConfigError naming it. A path that is not a regular file once
// symbolic links are followed is refused unread, as ReadFile refuses it.
func ReadEnvoyFile(path string) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, envoyrls.MaxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > envoyrls.MaxConfigSize {
		return nil, &envoyrls.ConfigError{File: path, Msg: tooLarge(f, envoyrls.MaxConfigSize, "an Envoy descriptor file")}
	}
	return data, nil
}

// envoySum hashes the files' names and contents, each length-prefixed so
// that no two sets hash alike by moving bytes between files.
func envoySum(files []file) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, part := range [][]byte{[]byte(f.path), f.data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func filePaths(files []file) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.path
	}
	return out
}
