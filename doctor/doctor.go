// Package doctor audits a live Floodgate deployment against the production
// checklist, read-only: Redis (version, eviction policy, persistence,
// replication, Cluster slot coverage, latency, memory), the keys under the
// deployment's prefix (TTLs, sizes, policies), clocks, the service
// instances, the configuration and the monitoring.
//
// Every check ends as one line of a [Report]: pass, warn or fail, with the
// evidence, the fix and what it read (and what that cost Redis). Doctor
// never writes: its Redis client refuses, before sending, any command
// outside a fixed list of reads (see [ReadOnlyCommands]), and the key scan
// is a paced SCAN bounded in keys and time, never KEYS.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoyrls"
)

// ErrInvalidOptions reports Options that Run cannot use.
var ErrInvalidOptions = errors.New("doctor: invalid options")

// Status is a check's verdict. The zero value is invalid.
type Status uint8

// The verdicts, from best to worst. Info is a check that has nothing to
// judge (for example no instance URLs were given): it never fails a run.
const (
	Info Status = iota + 1
	Pass
	Warn
	Fail
)

var statusNames = [...]string{Info: "info", Pass: "pass", Warn: "warn", Fail: "fail"}

// String returns "info", "pass", "warn" or "fail".
func (s Status) String() string {
	if s >= Info && s <= Fail {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Groups of checks, in report order.
const (
	GroupRedis      = "Redis"
	GroupKeys       = "Keys"
	GroupClocks     = "Clocks"
	GroupInstances  = "Instances"
	GroupConfig     = "Config"
	GroupMonitoring = "Monitoring"
	// GroupRun holds the check "deadline", present only when the run's
	// context ended (Options' ctx, the command's --timeout) before every
	// check had read what it needs.
	GroupRun = "Run"
)

var groupOrder = []string{GroupRedis, GroupKeys, GroupClocks, GroupInstances, GroupConfig, GroupMonitoring, GroupRun}

// Check is one line of the report.
type Check struct {
	// Group is one of the Group constants.
	Group string `json:"group"`
	// Name identifies the check within its group, e.g. "maxmemory-policy".
	Name string `json:"name"`
	// Status is the verdict.
	Status Status `json:"status"`
	// Summary says in one line what was found.
	Summary string `json:"summary"`
	// Evidence lists the facts behind the verdict (values read, keys
	// found), at most a few lines.
	Evidence []string `json:"evidence,omitempty"`
	// Fix says what to do when Status is Warn or Fail.
	Fix string `json:"fix,omitempty"`
	// Read says what the check read, e.g. "INFO memory on 3 primaries".
	Read string `json:"read"`
	// RedisCommands is the number of Redis commands the check sent (0 when
	// it read only HTTP endpoints or files), not counting those go-redis
	// sends itself when it opens a connection (HELLO, AUTH, SELECT, CLIENT
	// SETINFO, ...), nor, behind Sentinel, the questions that keep the
	// client on the primary the sentinels name (SENTINEL
	// GET-MASTER-ADDR-BY-NAME to each, once a second).
	RedisCommands int64 `json:"redis_commands"`
}

// Report is the outcome of one Run.
type Report struct {
	// Target describes what was audited (Redis address, prefix).
	Target string `json:"target"`
	// Started is when the run began.
	Started time.Time `json:"started"`
	// Duration is how long the run took.
	Duration time.Duration `json:"duration_ns"`
	// Checks are the checks in report order (grouped).
	Checks []Check `json:"checks"`
	// RedisCommands is the number of Redis commands the whole run sent,
	// counted as Check.RedisCommands.
	RedisCommands int64 `json:"redis_commands"`
}

// Worst returns the worst status of the report (Info when it is empty).
func (r *Report) Worst() Status {
	w := Info
	for _, c := range r.Checks {
		w = max(w, c.Status)
	}
	return w
}

// Count returns how many checks have status s.
func (r *Report) Count(s Status) int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == s {
			n++
		}
	}
	return n
}

// Find returns the check of group and name, and false when the report has
// none.
func (r *Report) Find(group, name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Group == group && c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// ScanOptions bounds the key scan. The zero value of each field takes its
// default.
type ScanOptions struct {
	// MaxKeys is the most keys examined, over all nodes. Default 10,000;
	// at most 10,000,000.
	MaxKeys int
	// MaxTime bounds the scan's duration. Default 10s.
	MaxTime time.Duration
	// Count is the COUNT hint of each SCAN call. Default 200; 1..10,000.
	Count int
	// Pause is the time slept between two SCAN batches, so the scan never
	// takes a large share of Redis's time. Default 2ms; negative means no
	// pause.
	Pause time.Duration
	// MemorySamples is the most keys whose MEMORY USAGE is read, spread
	// over the policies. Default 300.
	MemorySamples int
}

// Options configures Run. Only Redis is required.
type Options struct {
	// Redis says how to reach the deployment's Redis (URL, Sentinel or
	// Cluster addresses), as `floodgate serve` takes it.
	Redis config.Redis
	// Prefix is the deployment's key prefix (serve --prefix). Default "fg".
	Prefix string
	// LoginPrefix is the login guard's key prefix (serve --login-prefix).
	// Default "login".
	LoginPrefix string
	// ConfigFile, when set, is the configuration file the instances run;
	// otherwise the configuration stored in Redis under <prefix>:config is
	// read, and when there is none, the configuration checks say so.
	ConfigFile string
	// VerifyKeys, when not empty, are the keys the instances verify the
	// configuration in Redis with (serve --config-verify-key-file): a
	// stored document signed under none of them fails the validates
	// check, as the instances refuse it. Unused with ConfigFile.
	VerifyKeys [][]byte
	// EnvoyConfig, when set, are the Envoy descriptor configuration files
	// and directories the instances run (serve --envoy-config): the keys
	// of their descriptors, and of the limit overrides Envoy sends in
	// their domains, are then known owners, not "keys of no known
	// policy". Unreadable or invalid, Run fails.
	EnvoyConfig []string
	// Instances are base URLs of running `floodgate serve` instances, e.g.
	// "http://10.0.0.5:8080". Empty skips the instance checks.
	Instances []string
	// RateWindow is the time between the two scrapes of each instance's
	// /metrics from which the current fallback and denial rates come.
	// Default 2s; negative means one scrape (totals since start only).
	RateWindow time.Duration
	// PrometheusURL is the base URL of the Prometheus that scrapes the
	// instances. Empty skips the monitoring checks.
	PrometheusURL string
	// Scan bounds the key scan.
	Scan ScanOptions
	// LatencySamples is the number of timed script calls of the latency
	// check, made 50ms apart (less when they would take over 2.5s) within
	// 3s. Default 50; 1..1000.
	LatencySamples int
	// LatencyWarn and LatencyFail are the p99 round trips of the latency
	// probe, and the latencies of a LATENCY LATEST event of the last
	// minute, above which it warns and fails. Defaults 10ms and 50ms (the
	// shipped alert's threshold and the fallback's default budget).
	LatencyWarn, LatencyFail time.Duration
	// HTTPClient reads instances and Prometheus. Default: a client with a
	// 5s timeout.
	HTTPClient *http.Client
	// Now is the local clock, compared with Redis's TIME. Default
	// time.Now.
	Now func() time.Time
}

// The largest values of ScanOptions.MaxKeys, ScanOptions.Count,
// ScanOptions.MemorySamples and Options.LatencySamples (0 is each one's
// default).
const (
	MaxScanKeys       = 10_000_000
	MaxScanCount      = 10_000
	MaxMemorySamples  = 100_000
	MaxLatencySamples = 1000
)

func (o *Options) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	if !o.Redis.Enabled() {
		return bad("no Redis given (a URL, Sentinel or Cluster addresses)")
	}
	if o.Prefix == "" {
		o.Prefix = "fg"
	}
	if o.LoginPrefix == "" {
		o.LoginPrefix = "login"
	}
	for _, p := range []string{o.Prefix, o.LoginPrefix} {
		if err := floodgate.ValidatePrefix(p); err != nil {
			return bad("%v", err)
		}
	}
	s := &o.Scan
	switch {
	case s.MaxKeys < 0 || s.MaxKeys > MaxScanKeys:
		return bad("scan max keys %d out of range 0..%d", s.MaxKeys, MaxScanKeys)
	case s.MaxTime < 0:
		return bad("scan max time %v is negative", s.MaxTime)
	case s.Count < 0 || s.Count > MaxScanCount:
		return bad("scan count %d out of range 0..%d", s.Count, MaxScanCount)
	case s.MemorySamples < 0 || s.MemorySamples > MaxMemorySamples:
		return bad("memory samples %d out of range 0..%d", s.MemorySamples, MaxMemorySamples)
	case o.LatencyWarn < 0 || o.LatencyFail < 0:
		return bad("negative latency threshold")
	case o.LatencySamples < 0 || o.LatencySamples > MaxLatencySamples:
		return bad("latency samples %d out of range 0..%d", o.LatencySamples, MaxLatencySamples)
	}
	if s.MaxKeys == 0 {
		s.MaxKeys = 10_000
	}
	if s.MaxTime == 0 {
		s.MaxTime = 10 * time.Second
	}
	if s.Count == 0 {
		s.Count = 200
	}
	if s.Pause == 0 {
		s.Pause = 2 * time.Millisecond
	}
	if s.MemorySamples == 0 {
		s.MemorySamples = 300
	}
	if o.LatencySamples == 0 {
		o.LatencySamples = 50
	}
	for _, u := range o.Instances {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return bad("instance URL %q must start with http:// or https://", u)
		}
	}
	if u := o.PrometheusURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return bad("Prometheus URL %q must start with http:// or https://", u)
	}
	if o.RateWindow == 0 {
		o.RateWindow = 2 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// run is the state of one Run, shared by the checks.
type run struct {
	ctx     context.Context // the run's, bounding every read
	opts    Options
	client  redis.UniversalClient
	counter *counter
	report  *Report

	// Learned by earlier checks, used by later ones.
	info         map[string]map[string]string // INFO of each primary, by address
	primaryAddrs []string                     // primary addresses whose INFO was read, in order
	nodeCount    int                          // primaries the server check tried to read
	unreadAddrs  []string                     // those whose INFO failed
	cluster      *redis.ClusterClient         // nil unless Cluster
	unscraped    []string                     // given instances' host:port found as no Prometheus instance label
	cfg          *config.Config               // nil when none could be read
	cfgErr       error                        // why cfg is nil
	cfgSource    string
	envoy        *envoyrls.Config // the descriptors of Options.EnvoyConfig; nil without
	instances    []*instance      // read once, by the first check that needs them
	deadlineIn   string           // the check during which the run's context ended
	scanned      bool             // the key scan ran
	scannedKeys  int              // keys the scan found under the prefixes
	coverage     coverage         // cluster-require-full-coverage of each primary, on a Cluster
	// down is the error of the reachability probe when Redis did not
	// answer it, nil when it did: the checks that read Redis are then
	// skipped (see unreachable).
	down error
	// primaryNamed: Redis is down (down), and a majority of the
	// sentinels answered naming the primary that did not answer
	// (sentinelDiagnosis): the sentinel check, which reads the
	// sentinels alone, still runs, to say whether they can replace it.
	primaryNamed bool
	// noFailover is set by the sentinel check when it judges that the
	// sentinels cannot replace a failed primary (quorum, majority, no
	// replica up, TILT): the reachable check's fix then says so.
	noFailover bool
}

// Run audits the deployment and returns the report. It fails only when
// the options are unusable (or the Envoy configuration or the Redis
// settings cannot be loaded); every other problem is a check in the
// report. A Redis that does not answer the first PING is one too: the
// check Redis/reachable fails with the diagnosis and the fix, every check
// that reads Redis is reported skipped without sending anything more
// (except Redis/sentinel, which reads the sentinels alone, when a
// majority of them answered naming the primary that does not), and the
// checks that do not need Redis (the instances, a --config file,
// Prometheus) run as usual. Behind Sentinel, the client reaches the
// primary as serve's does: the one a majority of the sentinels name
// (sentinelfollow), asked before the probe and once a second after, so a
// sentinel that does not answer holds nothing up; while no majority
// answers, the one the sentinels that answer name (doctor changes
// nothing there). ctx bounds the whole run.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var envoy *envoyrls.Config
	if len(opts.EnvoyConfig) > 0 {
		er, err := config.NewEnvoyReloader(opts.EnvoyConfig, config.ReloaderOptions{})
		if err != nil {
			return nil, fmt.Errorf("doctor: Envoy descriptor configuration: %w", err)
		}
		envoy = er.Load()
	}
	client, follow, err := opts.Redis.FollowingClient()
	if err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	defer client.Close()
	if follow != nil {
		// Behind Sentinel, the client reaches the primary as serve's
		// does: the one a majority of the sentinels name, asked once a
		// second, until the client is closed (the defers run in
		// reverse). go-redis alone asks the sentinels at each new
		// connection and waits for every one's answer: one frozen
		// sentinel made the probe fail on a primary that was up.
		// While no majority answers, doctor, which only reads, dials
		// the primary the sentinels that answer name (serve would wait
		// for a majority): the sentinel check then fails naming the
		// others, instead of the probe blaming a primary that answers.
		follow.DialMinority()
		fctx, stopFollow := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); follow.Run(fctx, nil) }()
		defer func() { stopFollow(); <-done }()
	}
	r := &run{ctx: ctx, opts: opts, client: client, counter: &counter{}, info: map[string]map[string]string{}, envoy: envoy}
	r.counter.attach(client)
	if cc, ok := client.(*redis.ClusterClient); ok {
		r.cluster = cc
	}
	r.report = &Report{Target: fmt.Sprintf("%s, prefix %q", opts.Redis.String(), opts.Prefix), Started: opts.Now()}
	start := time.Now()

	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	if follow != nil {
		// The probe's dial goes to the primary the majority named, once
		// the Follower has asked them (within half a second).
		select {
		case <-follow.Asked():
		case <-pctx.Done():
		}
	}
	err = client.Ping(pctx).Err()
	for range 2 {
		if err == nil || !closedInSetup(err) || pctx.Err() != nil {
			break
		}
		// A Redis at maxclients writes its refusal and closes: a client
		// whose HELLO had reached it may read the close alone (the kernel
		// drops the unread refusal), which a TLS-only server's close
		// looks like too. Another connection most often reads the
		// refusal (a CI run read the close alone once).
		err = client.Ping(pctx).Err()
	}
	if err != nil && r.cluster != nil {
		err = r.probeNodes(pctx, err)
	}
	cancel()
	if err != nil {
		// A report all the same: what does not need Redis (the instances,
		// a --config file, Prometheus) is what an operator wants to know
		// while Redis is down.
		r.unreachable(ctx, err)
	}
	r.loadConfig(ctx)

	r.redisChecks(ctx)
	r.keyChecks(ctx)
	r.clockChecks(ctx)
	r.instanceChecks(ctx)
	r.configChecks(ctx)
	r.monitoringChecks(ctx)
	if err := ctx.Err(); err != nil {
		r.check(GroupRun, "deadline", func(c *Check) {
			c.Read = "nothing (the run's own deadline)"
			c.Status = Fail
			c.Summary = fmt.Sprintf("the run ended (%v) after %v, before every check had read what it needs: the checks that read after it are incomplete and say so", err, time.Since(start).Round(time.Millisecond))
			if r.deadlineIn != "" {
				c.Evidence = append(c.Evidence, "the time ran out during "+r.deadlineIn)
			}
			c.Fix = deadlineFix
		})
	}

	r.report.Duration = time.Since(start)
	r.report.RedisCommands = r.counter.n.Load()
	sortChecks(r.report.Checks)
	return r.report, nil
}

// sortChecks orders checks by group (stable within a group).
func sortChecks(cs []Check) {
	rank := map[string]int{}
	for i, g := range groupOrder {
		rank[g] = i
	}
	sort.SliceStable(cs, func(i, j int) bool { return rank[cs[i].Group] < rank[cs[j].Group] })
}

// check runs fn as the check group/name, counting the Redis commands it
// sends, and appends its result to the report.
func (r *run) check(group, name string, fn func(c *Check)) {
	c := Check{Group: group, Name: name}
	before, failedBefore := r.counter.n.Load(), r.counter.mark()
	ctx := r.ctxOrBackground()
	live := ctx.Err() == nil
	fn(&c)
	if live && ctx.Err() != nil {
		r.deadlineIn = "the check " + group + "/" + name
	}
	c.RedisCommands = r.counter.n.Load() - before
	r.judgeFailures(ctx, &c, r.counter.failures(failedBefore))
	if c.Status == 0 {
		c.Status = Info
	}
	r.report.Checks = append(r.report.Checks, c)
}

// ctxOrBackground returns the run's context, or a background one for a
// run built by a test without one.
func (r *run) ctxOrBackground() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}

// loadConfig reads the configuration the instances run: the file when one
// is given, else the one stored in Redis (not read when Redis is
// unreachable: cfgErr is then the probe's error).
func (r *run) loadConfig(ctx context.Context) {
	if r.opts.ConfigFile != "" {
		r.cfgSource = r.opts.ConfigFile
		r.cfg, r.cfgErr = config.LoadFile(r.opts.ConfigFile)
		return
	}
	keys, err := config.KeysFor(r.opts.Prefix)
	if err != nil {
		r.cfgErr = err
		return
	}
	r.cfgSource = "redis:" + keys.Config
	if r.down != nil {
		r.cfgErr = r.down
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r.cfg, r.cfgErr = config.LoadRedisVerified(cctx, r.client, keys, r.opts.VerifyKeys...)
}

// probeNodes is the reachability probe of a Cluster whose PING, sent to
// one node, failed with err: it pings every primary and returns nil when
// one answers, err when none does. One node that refuses doctor (at its
// maxclients limit, say) or does not answer is then named by the checks
// that read it, as a dead node is, instead of every check being skipped:
// a walk's one node of three at maxclients made the whole cluster
// "cannot reach Redis".
func (r *run) probeNodes(ctx context.Context, err error) error {
	var answered atomic.Bool
	_ = r.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if c.Ping(ctx).Err() == nil {
			answered.Store(true)
		}
		return nil
	})
	if answered.Load() {
		return nil
	}
	return err
}
