package doctor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/plural"
)

// bigSlidingLog is the sliding-log limit from which the config check
// warns: each identity's log keeps up to Limit members (tens of bytes
// each), so 1,000 is already tens of kilobytes per identity.
const bigSlidingLog = 1000

func (r *run) configChecks(ctx context.Context) {
	r.check(GroupConfig, "validates", func(c *Check) {
		c.Read = "GET " + r.opts.Prefix + ":config and the parser of `floodgate serve` (one Redis command, already counted by the first check)"
		if r.opts.ConfigFile != "" {
			c.Read = "the file " + r.opts.ConfigFile
		}
		switch {
		case r.cfg != nil:
			c.Status = Pass
			tiers := "tier " + r.cfg.DefaultTier()
			if len(r.cfg.Tiers()) > 1 {
				tiers = fmt.Sprintf("tiers %s (default %s)", strings.Join(r.cfg.Tiers(), ", "), r.cfg.DefaultTier())
			}
			c.Summary = fmt.Sprintf("%s is valid: version %q, %s, %s, %s, %s", r.cfgSource, r.cfg.Version(),
				plural.Count(len(r.cfg.Policies()), "policy", "policies"), plural.Count(len(r.cfg.Quotas()), "quota", "quotas"),
				plural.Count(len(r.cfg.ConcurrencyLimits()), "concurrency limit", "concurrency limits"), tiers)
			r.refusedBy(ctx, c)
		case errors.Is(r.cfgErr, config.ErrNotFound):
			c.Status = Warn
			c.Summary = fmt.Sprintf("no configuration in Redis under %s:config and no --config given: the checks that need the policies were skipped", r.opts.Prefix)
			c.Fix = "give doctor the file the instances run (--config FILE), or publish it to Redis (floodgate config push FILE) and run the instances with --config-from-redis"
			// Instances that read it from there keep the document they
			// applied, but one started now finds none: the key was
			// deleted, or Redis lost it (restarted without persistence).
			// An instance that never applied one (no-configuration) has
			// none to keep.
			var from, none []string
			for _, in := range r.readInstances(ctx) {
				switch {
				case in.configSource != r.cfgSource:
				case in.noConfiguration():
					none = append(none, fmt.Sprintf("%s reads it and has no configuration (/readyz no-configuration): it answers every HTTP decision 503", in.url))
				default:
					from = append(from, fmt.Sprintf("%s runs version %q from %s", in.url, in.configVersion, in.configSource))
				}
			}
			if len(from)+len(none) > 0 {
				c.Status = Fail
				var parts []string
				if len(from) > 0 {
					parts = append(parts, fmt.Sprintf("%s read theirs from it: %s the one %s applied, an instance started now finds none",
						plural.Count(len(from), "instance", "instances"), plural.Word(len(from), "it keeps", "they keep"), plural.Word(len(from), "it", "they")))
				}
				if len(none) > 0 {
					parts = append(parts, fmt.Sprintf("%s %s none: %s every HTTP decision 503 until a document is pushed",
						plural.Count(len(none), "instance", "instances"), plural.Word(len(none), "reading it has", "reading it have"), plural.Word(len(none), "it answers", "they answer")))
				}
				c.Summary = fmt.Sprintf("no configuration in Redis under %s:config, but %s; the checks that need the policies were skipped", r.opts.Prefix, strings.Join(parts, "; "))
				c.Evidence = append(from, none...)
				c.Fix = "publish the configuration the instances run again (floodgate config push FILE: over nothing stored it needs no --force, whatever its version; push the version they run, or a newer one, as instances that apply a lower one count it in floodgate_config_version_regressions_total), and find out how it went: a deleted key, or a Redis restarted without persistence (see Redis/persistence)"
				if len(from) == 0 {
					c.Fix = "publish the configuration the instances are to run (floodgate config push FILE: over nothing stored it needs no --force): an instance with none applies the first valid document it reads; find out why there is none: never pushed, a deleted key, or a Redis restarted without persistence (see Redis/persistence)"
				}
			}
		case r.down != nil && r.opts.ConfigFile == "":
			c.Read = "nothing (Redis is unreachable: " + r.opts.Prefix + ":config not read)"
			c.Status = Fail
			c.Summary = fmt.Sprintf("%s could not be read, Redis is unreachable (see Redis/reachable): nothing is known of the configuration the instances run; the checks that need the policies were skipped", r.cfgSource)
			c.Fix = "bring Redis back (see Redis/reachable), or give doctor the file the instances run (--config FILE) to check it now"
			// Instances that run a file (their /readyz config_source)
			// do not read the stored document: a walk's file-configured
			// fleet was said to run a configuration of which "nothing is
			// known".
			var files, stored []string
			for _, in := range r.readInstances(ctx) {
				switch {
				case in.notFloodgate != "" || in.readyStatus == 0 || in.configSource == "":
				case strings.HasPrefix(in.configSource, "redis:"):
					stored = append(stored, fmt.Sprintf("%s runs version %q from %s", in.url, in.configVersion, in.configSource))
				default:
					files = append(files, fmt.Sprintf("%s runs version %q from the file %s", in.url, in.configVersion, in.configSource))
				}
			}
			c.Evidence = append(files, stored...)
			if len(files) > 0 && len(stored) == 0 {
				c.Status = Warn
				c.Summary = fmt.Sprintf("the instances run a configuration file (/readyz config_source), not %s (unread: Redis is unreachable, see Redis/reachable): doctor was given no --config, so the checks that need the policies were skipped", r.cfgSource)
				c.Fix = "give doctor the file the instances run (--config FILE) to check it"
			}
		case errors.Is(r.cfgErr, config.ErrSignature):
			c.Status = Fail
			c.Summary = fmt.Sprintf("%s is refused: %v", r.cfgSource, r.cfgErr)
			if errors.Is(r.cfgErr, config.ErrRespaced) {
				c.Fix = "push the file again (floodgate config push FILE --sign-key-file KEY): it replaces a stored copy that differs only in spacing or line ends; instances refuse the stored copy and keep their last good configuration, and one started now has none"
				break
			}
			c.Fix = "give doctor the keys the instances verify with (--config-verify-key-file, once for each of serve's --config-verify-key-file), or sign the document again under one of them (floodgate config push --sign-key-file FILE); instances started with --config-verify-key-file refuse a document none of their keys signed and keep their last good configuration"
		case r.opts.ConfigFile == "" && !isParseError(r.cfgErr):
			// Reading the document failed: nothing is known of its content.
			c.Status = Fail
			c.Summary = fmt.Sprintf("%s could not be read: %v; the checks that need the policies were skipped", r.cfgSource, r.cfgErr)
			switch classify(r.ctxOrBackground(), r.cfgErr) {
			case errNoPerm:
				c.Fix = permissionFix()
			case errDeadline:
				c.Fix = deadlineFix
			case errUnreachable:
				c.Fix = unreachableFixOf(r.cfgErr)
			default:
				c.Fix = "read the error: doctor reads the document with GET, STRLEN and GETRANGE of " + r.opts.Prefix + ":config"
			}
		case r.opts.ConfigFile != "" && !isParseError(r.cfgErr):
			// The file could not be opened or read (missing, no
			// permission): it has no errors to list.
			c.Status = Fail
			c.Summary = fmt.Sprintf("%s could not be read: %v; the checks that need the policies were skipped", r.cfgSource, r.cfgErr)
			c.Fix = "check the path given to --config (a relative one is from doctor's working directory) and that doctor may read it: give the file the instances run"
		default:
			c.Status = Fail
			c.Summary = fmt.Sprintf("%s does not validate: %v", r.cfgSource, r.cfgErr)
			c.Fix = "fix the errors listed (file:line:column); instances keep their last good configuration until then"
		}
	})
	if r.cfg == nil {
		return
	}
	r.check(GroupConfig, "tiers", func(c *Check) { r.checkTiers(ctx, c) })
	r.check(GroupConfig, "sliding-logs", r.checkBigLogs)
	r.check(GroupConfig, "hot-keys-and-slots", r.checkSlots)
	r.check(GroupConfig, "shadow", r.checkShadow)
	r.check(GroupConfig, "failure-mode", r.checkFailureMode)
}

// metricSourceRejected is 1 while an instance refuses the latest
// document of its configuration source.
const metricSourceRejected = "floodgate_config_source_rejected"

// refusedBy fails the validates check of a valid document when instances
// reading it report it rejected (floodgate_config_source_rejected 1): a
// Fail, not a Warn, as RateLimitConfigRejected alerts on that gauge, and
// the document doctor found valid is not what those instances run, while
// one started now would run it.
func (r *run) refusedBy(ctx context.Context, c *Check) {
	var refused []string
	sameVersion := false
	for _, in := range r.readInstances(ctx) {
		v, ok := sum(in.metrics, metricSourceRejected, func(l map[string]string) bool { return l["source"] == config.SourcePolicies })
		if in.configSource != r.cfgSource || !ok || v < 1 {
			continue
		}
		line := fmt.Sprintf("%s refuses it (%s 1) and runs version %q", in.url, metricSourceRejected, in.configVersion)
		if in.configVersion == r.cfg.Version() && in.configHash != "" && in.configHash != r.cfg.Hash() {
			sameVersion = true
			line += fmt.Sprintf(" under other bytes (hash %s, the stored one %s)", short(in.configHash), short(r.cfg.Hash()))
		}
		refused = append(refused, line)
	}
	if len(refused) == 0 {
		return
	}
	c.Status = Fail
	c.Evidence = append(c.Evidence, refused...)
	c.Summary += fmt.Sprintf("; but %s reading it %s it: %s the last good configuration", plural.Count(len(refused), "instance", "instances"),
		plural.Word(len(refused), "refuses", "refuse"), plural.Word(len(refused), "it keeps", "they keep"))
	c.Fix = "read why in the instances' logs (configuration rejected) or /admin/v1/config, fix the document and push it with a new version (floodgate config push FILE)"
	if sameVersion {
		c.Fix = "the stored document has the version they run under other bytes: if it differs from the file only in spacing, line ends or its signature line, push the file again (floodgate config push FILE), which replaces it; if its content changed, bump the version and push it"
	}
}

// isParseError reports an error about the configuration document itself
// (its syntax, its values), not about reading it.
func isParseError(err error) bool {
	var ce *config.Error
	return errors.As(err, &ce)
}

func (r *run) checkTiers(ctx context.Context, c *Check) {
	c.Read = "HLEN " + r.opts.Prefix + ":tiers"
	tiered := 0
	for _, p := range r.cfg.Policies() {
		if p.Tiered() {
			tiered++
		}
	}
	for _, q := range r.cfg.Quotas() {
		if q.Tiered() {
			tiered++
		}
	}
	keys, _ := config.KeysFor(r.opts.Prefix)
	if r.down != nil {
		c.Read = "the configuration (" + keys.Tiers + " not read: Redis is unreachable)"
		c.Evidence = append(c.Evidence, keys.Tiers+" not read (Redis is unreachable): the tier assignments are unknown")
	} else {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := r.client.HLen(hctx, keys.Tiers).Result()
		cancel()
		if err == nil {
			c.Evidence = append(c.Evidence, keys.Tiers+" holds "+plural.Count(n, "tier assignment", "tier assignments"))
		}
	}
	// A failed HLEN is in the evidence and the verdict: r.check judges the
	// check on the reads that failed (judgeFailures).
	def, _ := config.Default()
	switch {
	case def != nil && r.cfg.Hash() == def.Hash():
		// The same document whether the instances read it from the
		// binary, a copy in a file or a copy pushed to Redis: the
		// example's limits, not ones written for this deployment.
		c.Status = Warn
		c.Summary = fmt.Sprintf("the configuration (%s) is the built-in example, unchanged: its tiers and limits are the example's, not ones written for this deployment", r.cfgSource)
		c.Fix = "write your own configuration (floodgate config example prints the example to start from) and run the instances with --config FILE, or push it with floodgate config push for --config-from-redis"
	default:
		c.Status = Pass
		c.Summary = fmt.Sprintf("tiers (%s) and limits come from %s; %s on the tier", strings.Join(r.cfg.Tiers(), ", "), r.cfgSource,
			plural.Count(tiered, "policy or quota depends", "policies and quotas depend"))
	}
}

func (r *run) checkBigLogs(c *Check) {
	c.Read = "the configuration (no Redis command)"
	var big []string
	for _, p := range r.cfg.Policies() {
		for _, l := range p.Layers {
			lim := int64(0)
			for _, t := range r.cfg.Tiers() {
				if pt := l.Policy(t); pt.Algorithm == floodgate.SlidingLog {
					lim = max(lim, pt.Limit)
				}
			}
			if lim >= bigSlidingLog {
				big = append(big, fmt.Sprintf("%s.%s: sliding_log limit %d (up to %d members per identity)", p.Name, l.Name, lim, lim))
			}
		}
	}
	if len(big) > 0 {
		c.Status = Warn
		c.Evidence = firstN(big, maxListed)
		c.Summary = fmt.Sprintf("%s with a limit of %d or more: each identity's key keeps one member per request admitted in the window", plural.Count(len(big), "sliding-log layer", "sliding-log layers"), bigSlidingLog)
		c.Fix = "use sliding_window (two counters per identity, close to exact) for large limits; keep sliding_log for small exact ones such as 5 logins per 15 minutes"
		return
	}
	c.Status, c.Summary = Pass, fmt.Sprintf("no sliding log above a limit of %d", bigSlidingLog-1)
}

func (r *run) checkSlots(c *Check) {
	c.Read = "the configuration (no Redis command)"
	var hot, split []string
	for _, p := range r.cfg.Policies() {
		dims := map[string]bool{}
		for _, l := range p.Layers {
			dims[l.Dimension()] = true
			if len(l.Dimensions) == 0 && l.Shards <= 1 {
				hot = append(hot, fmt.Sprintf("%s.%s (limit %d per %v)", p.Name, l.Name, l.Policy("").Limit, l.Policy("").Window))
			}
		}
		if len(dims) > 1 {
			var ds []string
			for d := range dims {
				ds = append(ds, d)
			}
			sort.Strings(ds)
			split = append(split, fmt.Sprintf("%s: layers keyed by %s", p.Name, strings.Join(ds, ", ")))
		}
	}
	if len(hot) > 0 {
		c.Evidence = append(c.Evidence, "global layers on one key: "+strings.Join(firstN(hot, maxListed), "; "))
	}
	if len(split) > 0 {
		c.Evidence = append(c.Evidence, "policies whose layers use different identities: "+strings.Join(firstN(split, maxListed), "; "))
	}
	switch {
	case len(hot) > 0:
		c.Status = Warn
		c.Summary = plural.Count(len(hot), "global layer keeps its", "global layers keep their") + " whole limit on one key: every request of every identity writes it, one hot key on one Redis node"
		c.Fix = "set shards: N on the layer (the limit is split over N keys, on different Cluster slots)"
	case len(split) > 0 && r.cluster != nil:
		c.Status = Info
		c.Summary = fmt.Sprintf("%s several Cluster slots (their identities hash apart): each of their decisions is split into a reserve per slot and a release if one denies, two round trips instead of one", plural.Count(len(split), "policy spans", "policies span"))
	default:
		c.Status = Pass
		c.Summary = "no global layer on a single key"
		if len(split) > 0 {
			c.Summary += "; " + plural.Count(len(split), "policy", "policies") + " would span slots on a Cluster"
		}
	}
}

func (r *run) checkShadow(c *Check) {
	c.Read = "the configuration, and " + metricShadowDenied + " from the instances' /metrics already read"
	var shadow []string
	for _, p := range r.cfg.Policies() {
		for _, l := range p.Layers {
			if l.Shadow {
				shadow = append(shadow, p.Name+"."+l.Name)
			}
		}
	}
	for _, in := range r.instances {
		if v, ok := sum(in.metrics, metricShadowDenied, nil); ok {
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: %.0f %s a shadow layer would have denied", in.url, math.Round(v), plural.Word(math.Round(v), "request", "requests")))
		}
	}
	if len(shadow) > 0 {
		c.Status = Warn
		c.Summary = plural.Count(len(shadow), "layer in shadow mode counts", "layers in shadow mode count") + " but never deny: " + strings.Join(shadow, ", ")
		c.Fix = "once its numbers look right, enforce the layer (remove shadow: true) or remove it; a shadow layer left on protects nothing"
		return
	}
	c.Status, c.Summary = Pass, "no layer in shadow mode"
}

// loginStyle reports the policies that guard logins: named after login,
// or keyed by an account.
func (r *run) loginStyle() []string {
	if r.cfg == nil {
		return nil
	}
	var out []string
	for _, p := range r.cfg.Policies() {
		hit := strings.Contains(strings.ToLower(p.Name), "login")
		for _, l := range p.Layers {
			for _, d := range l.Dimensions {
				hit = hit || d == "account"
			}
		}
		if hit {
			out = append(out, p.Name)
		}
	}
	return out
}

// checkFailureMode checks that login-style policies fail closed, from
// the configuration's on_redis_failure, and lists the failure modes the
// instances have decided with (rate_limit_fallback_total's mode label).
func (r *run) checkFailureMode(c *Check) {
	c.Read = "the configuration, and " + metricFallback + " from the instances' /metrics already read"
	modes := map[string]bool{}
	for _, in := range r.instances {
		if f, ok := in.metrics[metricFallback]; ok {
			for _, m := range f.GetMetric() {
				if m.GetCounter().GetValue() > 0 {
					modes[labels(m)["mode"]] = true
				}
			}
		}
	}
	var seen []string
	for m := range modes {
		seen = append(seen, m)
	}
	sort.Strings(seen)
	if len(seen) > 0 {
		c.Evidence = append(c.Evidence, "failure modes that have decided (non-zero "+metricFallback+"): "+strings.Join(seen, ", "))
	}
	login := r.loginStyle()
	if len(login) == 0 {
		c.Status = Info
		c.Summary = "no login-style policy (named login, or keyed by account) in the configuration"
		return
	}
	// The configuration says how each policy fails (on_redis_failure);
	// a policy that leaves it unset follows the instances' --fallback,
	// which they do not export.
	var closed, open, local, unset []string
	for _, name := range login {
		p, _ := r.cfg.Policy(name)
		switch p.OnRedisFailure {
		case config.FailClosed:
			closed = append(closed, name)
		case config.FailOpen:
			open = append(open, name)
		case config.FailLocal:
			local = append(local, name)
		default:
			unset = append(unset, name)
		}
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("on_redis_failure of login-style policies: closed [%s], local [%s], open [%s], unset [%s]",
		strings.Join(closed, ", "), strings.Join(local, ", "), strings.Join(open, ", "), strings.Join(unset, ", ")))
	const fix = "a login endpoint should refuse rather than admit guesses while Redis is down: set on_redis_failure: closed on the policy"
	switch {
	case len(open) > 0:
		c.Status = Fail
		c.Summary = fmt.Sprintf("login-style policies (%s) admit every request while Redis is down (on_redis_failure: open)", strings.Join(open, ", "))
		c.Fix = fix
	case len(local) > 0:
		c.Status = Warn
		c.Summary = fmt.Sprintf("login-style policies (%s) fall back to per-instance counting while Redis is down (on_redis_failure: local)", strings.Join(local, ", "))
		c.Fix = fix
	case len(unset) > 0:
		c.Status = Warn
		c.Summary = fmt.Sprintf("login-style policies (%s) leave their failure mode to the instances' --fallback, which they do not export", strings.Join(unset, ", "))
		c.Fix = fix
	default:
		c.Status = Pass
		c.Summary = fmt.Sprintf("login-style policies (%s) fail closed", strings.Join(closed, ", "))
	}
}
