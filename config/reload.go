package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/internal/regularfile"
)

// Holder holds the active configuration. Load and Store are atomic, so a
// reader sees either the old or the new configuration, never a mix. It is
// safe for concurrent use.
type Holder struct {
	p          atomic.Pointer[Config]
	loaded     atomic.Bool // false from NewPendingHolder until the first apply
	rejected   atomic.Pointer[Rejection]
	unreadable atomic.Pointer[Rejection]
}

// Rejection describes the last document a Reloader refused since the
// active configuration was applied.
type Rejection struct {
	Source string    `json:"source"`
	Error  string    `json:"error"`
	At     time.Time `json:"at"`
}

// NewHolder returns a Holder whose active configuration is initial.
func NewHolder(initial *Config) (*Holder, error) {
	if initial == nil {
		return nil, fmt.Errorf("%w: nil initial configuration", ErrInvalid)
	}
	h := &Holder{}
	h.p.Store(initial)
	h.loaded.Store(true)
	return h, nil
}

// NewPendingHolder returns a Holder with no configuration yet, for a
// service whose configuration source (named source, such as
// "redis:fg:config") could not give a valid one at start: Load returns an
// empty configuration (no version, hash, policies, quotas, concurrency
// limits or tiers; its Source is source) and NotLoaded says why, until a
// Reloader applies the first valid document. initial, when not nil, is the
// failure of the read made at start: a document refused (an error matching
// ErrInvalid or ErrSignature) is kept as LastRejected, any other failure
// (the key missing, Redis unreachable) as Unreadable, so that NotLoaded
// says why before a watcher has read the source itself.
func NewPendingHolder(source string, initial error) *Holder {
	h := &Holder{}
	h.p.Store(&Config{source: source})
	if initial != nil {
		r := &Rejection{Source: source, Error: initial.Error(), At: time.Now().UTC()}
		if errors.Is(initial, ErrInvalid) || errors.Is(initial, ErrSignature) {
			h.rejected.Store(r)
		} else {
			h.unreadable.Store(r)
		}
	}
	return h
}

// Loaded reports whether the Holder has a configuration: always, but from
// NewPendingHolder until the first document is applied.
func (h *Holder) Loaded() bool { return h.loaded.Load() }

// NotLoaded returns nil once the Holder has a configuration, and until
// then (NewPendingHolder) an error saying why it has none, naming the
// source: its last read failed (Unreadable), its document was refused
// (LastRejected), or it has not been read yet.
func (h *Holder) NotLoaded() error {
	if h.loaded.Load() {
		return nil
	}
	source := h.p.Load().Source()
	if u := h.unreadable.Load(); u != nil {
		return fmt.Errorf("no configuration loaded: %s cannot be read: %s", u.Source, u.Error)
	}
	if r := h.rejected.Load(); r != nil {
		return fmt.Errorf("no configuration loaded: the document in %s was rejected: %s", r.Source, r.Error)
	}
	return fmt.Errorf("no configuration loaded: %s has not been read yet", source)
}

// Load returns the active configuration.
func (h *Holder) Load() *Config { return h.p.Load() }

// store makes c the active configuration.
func (h *Holder) store(c *Config) {
	h.p.Store(c)
	h.loaded.Store(true)
	h.rejected.Store(nil)
}

// LastRejected returns the last document refused since the active
// configuration was applied (invalid, unsigned, over the size limit), or
// nil if none was: while it is set, the source holds something other than
// what runs.
func (h *Holder) LastRejected() *Rejection { return h.rejected.Load() }

// Unreadable returns, while a Reloader's last read of its source failed
// (a file deleted or unreadable, a dangling symbolic link, a Redis key
// gone or Redis down), that failure: its source, its error and when the
// failures began (At). It is nil once a read succeeds again.
func (h *Holder) Unreadable() *Rejection { return h.unreadable.Load() }

// Reload results, the values of the result label of
// floodgate_config_reload_total.
const (
	// ResultApplied: a new configuration is active.
	ResultApplied = "applied"
	// ResultInvalid: a new document was rejected; the last good
	// configuration stays active.
	ResultInvalid = "invalid"
	// ResultError: the source could not be read; the last good
	// configuration stays active.
	ResultError = "error"
)

// Reloaded configurations, the values of the source label of
// floodgate_config_reload_total,
// floodgate_config_last_reload_success_timestamp_seconds,
// floodgate_config_source_rejected and
// floodgate_config_source_unreadable.
const (
	// SourcePolicies is the service configuration (policies, quotas,
	// concurrency limits and tiers), from a file or from Redis.
	SourcePolicies = "policies"
	// SourceEnvoy is the Envoy descriptor configuration of the gRPC API.
	SourceEnvoy = "envoy"
)

// ReloaderOptions configures a Reloader or an EnvoyReloader. The zero value
// is ready to use.
type ReloaderOptions struct {
	// Logger receives one line per applied or rejected configuration.
	// Default: discard.
	Logger *slog.Logger
	// Registerer, when set, gets floodgate_config_reload_total{source,result}
	// (result applied, invalid or error) and
	// floodgate_config_last_reload_success_timestamp_seconds{source}
	// (the active configuration's apply; restoring the active content
	// after a rejection is not one) and
	// floodgate_config_source_rejected{source} (1 while the source's
	// latest document is rejected, 0 once it holds one that is applied or
	// the active one again) and
	// floodgate_config_source_unreadable{source} (1 from a failed read of
	// the source until its next successful read, 0 otherwise; a Reloader
	// whose Holder came from NewPendingHolder with an unreadable source
	// starts at 1); a Reloader also gets
	// floodgate_config_version_regressions_total (documents applied by
	// ApplyVersioned whose version is not newer than the active one's; 0
	// from the start). A Reloader and an EnvoyReloader may share one
	// Registerer: they count in the same metrics under their own source.
	Registerer prometheus.Registerer
	// VerifyKeys, when not empty, makes WatchRedis apply only documents
	// signed under one of them (Sign; "floodgate config push
	// --sign-key-file"; VerifyAny); another document is rejected and
	// counted as ResultInvalid. Two keys, the old and the new, let
	// instances accept the document while its key is rotated. Default
	// nil: documents are not checked.
	VerifyKeys [][]byte
}

// reloadMetrics counts the reloads of one source.
type reloadMetrics struct {
	source  string
	reloads *prometheus.CounterVec
	lastOK  *prometheus.GaugeVec
	// rejected is 1 while the source's latest document was rejected.
	rejected *prometheus.GaugeVec
	// unreadable is 1 while the source's latest read failed.
	unreadable *prometheus.GaugeVec
}

// newReloadMetrics returns the metrics of source; loaded says whether a
// configuration of it is active (the last apply is then now), unreadable
// whether its last read, made before, failed.
func newReloadMetrics(reg prometheus.Registerer, source string, loaded, unreadable bool) (*reloadMetrics, error) {
	m := &reloadMetrics{
		source: source,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_config_reload_total",
			Help: "Configuration reloads by source (policies, envoy) and result: applied, invalid (rejected, last good kept) or error (source unreadable).",
		}, []string{"source", "result"}),
		lastOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_config_last_reload_success_timestamp_seconds",
			Help: "Unix time the active configuration of each source was applied (0 while a service started with --config-from-redis has none).",
		}, []string{"source"}),
		rejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_config_source_rejected",
			Help: "1 while the latest document read from the source was rejected (the last good configuration stays active), 0 once the source holds one that is applied or the active one again.",
		}, []string{"source"}),
		unreadable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_config_source_unreadable",
			Help: "1 from a failed read of the source (a file missing or unreadable, Redis unreachable or the key missing) until its next successful read, 0 otherwise; the last good configuration stays active meanwhile.",
		}, []string{"source"}),
	}
	if reg != nil {
		var err error
		if m.reloads, err = registerShared(reg, m.reloads); err != nil {
			return nil, err
		}
		if m.lastOK, err = registerShared(reg, m.lastOK); err != nil {
			return nil, err
		}
		if m.rejected, err = registerShared(reg, m.rejected); err != nil {
			return nil, err
		}
		if m.unreadable, err = registerShared(reg, m.unreadable); err != nil {
			return nil, err
		}
	}
	for _, res := range []string{ResultApplied, ResultInvalid, ResultError} {
		m.reloads.WithLabelValues(source, res)
	}
	if loaded {
		m.lastOK.WithLabelValues(source).SetToCurrentTime()
	} else {
		m.lastOK.WithLabelValues(source).Set(0)
	}
	m.rejected.WithLabelValues(source).Set(0)
	m.setUnreadable(unreadable)
	return m, nil
}

// registerShared registers c on reg, or returns the identical collector
// already registered there (by the reloader of another source).
func registerShared[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("config: registering metrics: %w", err)
}

// count counts one reload's result; an applied or invalid one also sets
// floodgate_config_source_rejected (an error leaves it: an unreadable
// source holds what it held) and an error sets
// floodgate_config_source_unreadable to 1 (the next successful read of
// the source, setUnreadable(false), puts it back to 0).
func (m *reloadMetrics) count(result string) {
	m.reloads.WithLabelValues(m.source, result).Inc()
	switch result {
	case ResultApplied:
		m.lastOK.WithLabelValues(m.source).SetToCurrentTime()
		m.setRejected(false)
	case ResultInvalid:
		m.setRejected(true)
	case ResultError:
		m.setUnreadable(true)
	}
}

// setUnreadable sets floodgate_config_source_unreadable: whether the
// source's latest read failed.
func (m *reloadMetrics) setUnreadable(unreadable bool) {
	v := 0.0
	if unreadable {
		v = 1
	}
	m.unreadable.WithLabelValues(m.source).Set(v)
}

// setRejected sets floodgate_config_source_rejected: whether the source's
// latest document was rejected. A read finding the active configuration
// again sets it to false without counting an apply.
func (m *reloadMetrics) setRejected(rejected bool) {
	v := 0.0
	if rejected {
		v = 1
	}
	m.rejected.WithLabelValues(m.source).Set(v)
}

// Reloader validates new configuration documents and swaps them into a
// Holder, all or nothing. It is safe for concurrent use; applies are
// serialised.
type Reloader struct {
	holder  *Holder
	log     *slog.Logger
	metrics *reloadMetrics
	// regressions counts versioned documents applied over a newer
	// active version (floodgate_config_version_regressions_total).
	regressions prometheus.Counter
	mu          sync.Mutex
	verify      [][]byte
	now         chan struct{} // CheckNow's requests to the watcher
	moved       chan struct{} // PrimaryMoved's requests to WatchRedis
	// move is the last primary switch PrimaryMoved reported (under mu).
	move primaryMove
}

// primaryMove is a switch of Redis primary, from one server to another.
type primaryMove struct {
	from, to string
	at       time.Time
}

// movedWindow is how long after a switch of primary (PrimaryMoved) a
// document older than the active one is logged as most likely a push the
// switch lost.
const movedWindow = time.Minute

// NewReloader returns a Reloader updating h. Its reloads are counted under
// source SourcePolicies.
func NewReloader(h *Holder, opts ReloaderOptions) (*Reloader, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil holder", ErrInvalid)
	}
	m, err := newReloadMetrics(opts.Registerer, SourcePolicies, h.Loaded(), h.Unreadable() != nil)
	if err != nil {
		return nil, err
	}
	regressions := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_config_version_regressions_total",
		Help: "Configurations from Redis applied although their version is not newer than the active one's: a Redis restored from an older snapshot, a wiped Redis pushed to again, a push lost in a Sentinel failover, or a forced rollback (config push --force).",
	})
	if opts.Registerer != nil {
		if regressions, err = registerShared(opts.Registerer, regressions); err != nil {
			return nil, err
		}
	}
	r := &Reloader{holder: h, log: opts.Logger, metrics: m, regressions: regressions, verify: opts.VerifyKeys, now: make(chan struct{}, 1), moved: make(chan struct{}, 1)}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// Holder returns the Holder the Reloader updates.
func (r *Reloader) Holder() *Holder { return r.holder }

// Apply parses data (named source in messages) and, if it is valid and
// differs from the active configuration, makes it active. An invalid
// document is logged, counted and returned as an error wrapping ErrInvalid;
// the active configuration does not change. It returns the configuration
// active afterwards.
func (r *Reloader) Apply(data []byte, source string) (*Config, error) {
	return r.apply(data, source, false)
}

// ApplyVersioned is Apply for a shared source such as Redis, where the
// version field tells instances apart: the document must have a version,
// and a document with the active version but other content is rejected
// (bump the version to change it). A document whose version is not newer
// than the active one (CompareVersions) is applied, as a forced rollback
// must be, but logged at WARN ("configuration applied: the version is not
// newer than the previous one") and counted in
// floodgate_config_version_regressions_total: the store going back
// (restored from an older snapshot, wiped and pushed to again, or a push
// lost in a failover, which the log line names as the likely cause in
// the minute after PrimaryMoved) looks the same.
func (r *Reloader) ApplyVersioned(data []byte, source string) (*Config, error) {
	return r.apply(data, source, true)
}

func (r *Reloader) apply(data []byte, source string, versioned bool) (*Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	active := r.holder.Load()
	c, err := Parse(data, source)
	if err == nil && versioned {
		err = checkVersion(c, active)
	}
	if err != nil {
		r.rejectLocked(active, source, err)
		return active, err
	}
	if c.Hash() == active.Hash() {
		// The source holds what runs again: after a rejection, say so,
		// so that its error line has an end.
		// It is not counted as applied: nothing changed in force.
		if r.holder.rejected.Swap(nil) != nil {
			r.log.Info("configuration source holds the active configuration again", "source", source, "config_version", active.Version())
		}
		r.metrics.setRejected(false)
		return active, nil
	}
	r.holder.store(c)
	r.metrics.count(ResultApplied)
	attrs := []any{"source", source, "config_version", c.Version(),
		"previous_config_version", active.Version(), "policies", len(c.Policies()),
		"quotas", len(c.Quotas()), "concurrency_limits", len(c.ConcurrencyLimits())}
	if versioned && active.Version() != "" && CompareVersions(c.Version(), active.Version()) <= 0 {
		// Not refused: a forced rollback is legitimate. But the same
		// step back, unasked, is how a store's loss shows.
		r.regressions.Inc()
		cause := "a forced rollback (config push --force), or the store went back: Redis restored from an older snapshot, or wiped and pushed to again"
		if m := r.move; !m.at.IsZero() && time.Since(m.at) < movedWindow {
			cause = fmt.Sprintf("a push lost in a Redis failover: the primary moved from %s to %s %v ago, and version %q, stored on the old primary, never reached the new one, which holds %q; push %q again if it is wanted (or a forced rollback, config push --force, made since)",
				m.from, m.to, time.Since(m.at).Round(time.Millisecond), active.Version(), c.Version(), active.Version())
		}
		r.log.Warn("configuration applied: the version is not newer than the previous one",
			append(attrs, "likely_cause", cause)...)
		r.warn(c, source)
		return c, nil
	}
	r.log.Info("configuration applied", attrs...)
	r.warn(c, source)
	return c, nil
}

// warn logs c's Warnings, each a line at WARN.
func (r *Reloader) warn(c *Config, source string) {
	for _, w := range c.Warnings() {
		r.log.Warn("configuration warning: "+w, "source", source, "config_version", c.Version())
	}
}

// reject counts and logs a document refused before parsing (a bad
// signature).
func (r *Reloader) reject(source string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejectLocked(r.holder.Load(), source, err)
}

// unverified returns why data, read from source and failing verification
// with err, is refused: checkVersion's error when it is the active
// version's document but for its spacing or signature line (respacing
// breaks a signature, so err would blame the key or the signature's
// form), else err.
func (r *Reloader) unverified(data []byte, source string, err error) error {
	active := r.holder.Load()
	c, perr := Parse(data, source)
	if perr != nil || !r.holder.Loaded() || c.DifferenceFrom(active) == OtherContent {
		return err
	}
	if verr := checkVersion(c, active); verr != nil {
		return verr
	}
	return err
}

func (r *Reloader) rejectLocked(active *Config, source string, err error) {
	r.holder.rejected.Store(&Rejection{Source: source, Error: err.Error(), At: time.Now().UTC()})
	r.metrics.count(ResultInvalid)
	if !r.holder.Loaded() {
		r.log.Error(noConfigRejected, "source", source, "error", err)
		return
	}
	r.log.Error("configuration rejected; keeping the last good one",
		"source", source, "error", err, "active_config_version", active.Version(), "active_source", active.Source())
}

// The log messages of a source failing while no configuration is active
// (NewPendingHolder).
const (
	noConfigRejected   = "configuration rejected; no configuration is active: decisions answer 503 no-configuration until the source holds a valid one"
	noConfigUnreadable = "configuration source unreadable; no configuration is active: decisions answer 503 no-configuration until the source holds a valid one"
)

func checkVersion(c, active *Config) error {
	if c.Version() == "" {
		return &Error{File: c.Source(), Msg: "a shared configuration needs a version field"}
	}
	if c.Version() == active.Version() && c.Hash() != active.Hash() {
		// Refused even when only the spacing differs: the hash is the
		// document's identity across the fleet (/readyz config_hash,
		// floodgate doctor), and an instance started now loads the
		// stored bytes, so taking them for the active document would
		// leave one version under two hashes with nothing flagging it.
		// The refusal keeps floodgate_config_source_rejected at 1 until
		// the document is pushed again, or, when this instance runs a
		// copy written around push (redis-cli set) and push has since
		// stored the file, until it restarts: nothing tells the two
		// apart here, so the message gives both.
		var what string
		switch c.DifferenceFrom(active) {
		case SpacingOnly:
			what = "content that differs from this document only in spacing or line ends (a final newline, CR LF, trailing spaces: redis-cli set KEY \"$(cat FILE)\" drops the final newline). " +
				"If floodgate config push stored this document, this instance runs another copy, stored around push before it started: restart it to take this one; " +
				"else store the file with floodgate config push FILE. Or bump the version to change it"
		case SignatureOnly:
			what = "the same content under another signature line (signed under another key, or one of the two unsigned); bump the version to change it"
		default:
			what = "different content; bump the version to change it"
		}
		return &Error{File: c.Source(), Msg: fmt.Sprintf("version %q is already active with %s", c.Version(), what)}
	}
	return nil
}

// CheckNow makes the running WatchFile or WatchRedis read its source at
// once rather than at its next poll (a file is read whatever its
// modification time and size say), as floodgate serve does on SIGHUP. It
// does not wait; requests made while one is pending are merged, and
// without a watcher running it does nothing until one starts.
func (r *Reloader) CheckNow() {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// PrimaryMoved tells the Reloader that its Redis client moved from one
// primary to another (sentinelfollow.Follower.OnMove: a failover): the
// running WatchRedis then subscribes again and reads the document at
// once, on the new primary, rather than at its next poll, so that a
// push the old primary took and the new one never got is seen within a
// moment. A document older than the active one read in the minute after
// is logged as most likely such a lost push. It does not wait.
func (r *Reloader) PrimaryMoved(from, to string) {
	r.mu.Lock()
	r.move = primaryMove{from: from, to: to, at: time.Now()}
	r.mu.Unlock()
	select {
	case r.moved <- struct{}{}:
	default:
	}
}

// unchanged logs that a read asked for (CheckNow: SIGHUP) found the
// active configuration: after a rejection, as apply does, that the
// source holds the active configuration again, so that the rejection's
// error line has an end; else that it is unchanged.
func (r *Reloader) unchanged(source string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics.setRejected(false)
	active := r.holder.Load()
	if r.holder.rejected.Swap(nil) != nil {
		r.log.Info("configuration source holds the active configuration again", "source", source, "config_version", active.Version())
		return
	}
	r.log.Info("configuration unchanged", "source", source, "config_version", active.Version())
}

// readable notes a successful read of source, setting
// floodgate_config_source_unreadable to 0: after a failed one (*last
// set), it logs that the source can be read again, so that the failure's
// error line has an end.
func (r *Reloader) readable(last *string, source string) {
	r.holder.unreadable.Store(nil)
	r.metrics.setUnreadable(false)
	if *last != "" {
		*last = ""
		r.log.Info("configuration source readable again", "source", source)
	}
}

// isConfigError reports an error of ReadFile that is the file's content's
// fault (too large), not the file system's.
func isConfigError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// sourceError counts and logs a source that could not be read, once per
// distinct message so that a missing file does not log every second; a
// read asked for (forced: CheckNow, SIGHUP) logs it whatever, as its
// outcome.
func (r *Reloader) sourceError(last *string, source string, err error, forced bool) {
	r.metrics.count(ResultError)
	since := time.Now().UTC()
	if u := r.holder.unreadable.Load(); u != nil && u.Source == source {
		since = u.At // failing since the first failure of the streak
	}
	r.holder.unreadable.Store(&Rejection{Source: source, Error: err.Error(), At: since})
	if msg := err.Error(); msg != *last || forced {
		*last = msg
		if !r.holder.Loaded() {
			r.log.Error(noConfigUnreadable, "source", source, "error", err)
			return
		}
		r.log.Error("configuration source unreadable; keeping the last good configuration", "source", source, "error", err)
	}
}

// RegularFile returns nil when path, once symbolic links are followed (a
// Kubernetes ConfigMap's ..data links), is a regular file, and otherwise
// an error saying what it is: "ff.yaml is a named pipe: want a regular
// file ...". It does not open path. floodgate serve refuses a --config or
// --envoy-config that is not a regular file, at start and at each poll:
// reading a named pipe, such as <(command) or /dev/stdin, waits for a
// writer, and a second read finds it empty.
func RegularFile(path string) error {
	_, err := statRegular(path)
	return err
}

// statRegular is os.Stat of path, and RegularFile's error when path is not
// a regular file; a dangling symbolic link is named as such, with its
// target ("cfg.yaml is a dangling symbolic link: its target ..data/cfg.yaml
// does not exist"), not as "stat cfg.yaml: no such file or directory".
func statRegular(path string) (os.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if lfi, lerr := os.Lstat(path); lerr == nil && lfi.Mode()&fs.ModeSymlink != 0 {
				target, _ := os.Readlink(path)
				return nil, &danglingError{path: path, target: target, err: err}
			}
		}
		return nil, err
	}
	return fi, notRegular(path, fi)
}

// danglingError is statRegular's error for a dangling symbolic link; it
// wraps os.Stat's error (fs.ErrNotExist).
type danglingError struct {
	path, target string
	err          error
}

func (e *danglingError) Error() string {
	return fmt.Sprintf("%s is a dangling symbolic link: its target %s does not exist", e.path, e.target)
}

func (e *danglingError) Unwrap() error { return e.err }

// notRegular is RegularFile's error for path, whose os.Stat is fi. The
// reason fits the kind: a directory holds no document, and the read of a
// named pipe, a device or a socket may never end.
func notRegular(path string, fi os.FileInfo) error {
	return documentErr(regularfile.Check(path, fi))
}

// documentErr says what to do about a *regularfile.Error for a document,
// read again at each change and SIGHUP; it returns other errors as they
// are.
func documentErr(err error) error {
	var e *regularfile.Error
	switch {
	case !errors.As(err, &e):
		return err
	case e.Mode.IsDir():
		return fmt.Errorf("%w holding the document", e)
	}
	return fmt.Errorf("%w and a document is read again at each change and SIGHUP: write a generated document to a file", e)
}

// openRegular opens path for reading when it is a regular file once
// symbolic links are followed, and otherwise returns notRegular's error
// without reading it (see regularfile.Open: a file swapped for a pipe
// between a check and the open is refused too).
func openRegular(path string) (*os.File, error) {
	f, err := regularfile.Open(path)
	return f, documentErr(err)
}

// ReadFile reads a configuration file of at most MaxSize bytes. A path
// that is not a regular file once symbolic links are followed is refused
// unread, with RegularFile's error (see openRegular).
func ReadFile(path string) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, &Error{File: path, Msg: tooLarge(f, MaxSize, "a policies file")}
	}
	return data, nil
}

// tooLarge says that f, read up to one byte past max, is larger than a
// what may be: "file is 1500000 bytes (max 1048576 for a policies
// file)", with f's size when f is a regular file, else "file is larger
// than ...".
func tooLarge(f *os.File, max int, what string) string {
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > int64(max) {
		return fmt.Sprintf("file is %d bytes (max %d for %s)", fi.Size(), max, what)
	}
	return fmt.Sprintf("file is larger than %d bytes (max for %s)", max, what)
}

// LoadFile reads and parses a configuration file.
func LoadFile(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		if isConfigError(err) {
			return nil, err // it names the file already
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}
