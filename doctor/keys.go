package doctor

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

// scannedKey is one key the scan met.
type scannedKey struct {
	name   string
	parsed parsedKey
	pttl   time.Duration // -1 no TTL, -2 gone
	card   int64         // ZCARD of sorted-set states, -1 otherwise
	node   *redis.Client
}

// scanResult is what the paced scan gathered.
type scanResult struct {
	keys      []scannedKey
	calls     int      // SCAN calls
	found     int      // keys SCAN returned, read or not (their PTTL may have failed)
	silent    []string // primaries whose SCAN failed, with the error: "127.0.0.1:7000 (i/o timeout)"
	truncated bool     // stopped by the key or time cap
	why       string
	elapsed   time.Duration
	errs      []string
	firstErr  error // the error of errs[0]
	// cardErrs are the keys named as sorted sets (sliding logs, lease
	// sets) whose ZCARD failed, with the error: their sizes are unknown.
	cardErrs []string
}

// fail records a read error of the scan.
func (res *scanResult) fail(line string, err error) {
	if res.firstErr == nil {
		res.firstErr = err
	}
	res.errs = append(res.errs, line)
}

// scan walks the keys matching the deployment's prefix and the login
// guard's on every primary with SCAN (never KEYS), pausing between
// batches, and reads each key's PTTL (and ZCARD for sorted sets) in one
// pipeline per batch. It stops at Scan.MaxKeys keys or Scan.MaxTime.
func (r *run) scan(ctx context.Context, nodes []node) scanResult {
	var res scanResult
	start := time.Now()
	deadline := start.Add(r.opts.Scan.MaxTime)
	patterns := []string{r.opts.Prefix + ":*", "{" + r.opts.LoginPrefix + "}:*"}
outer:
	for _, n := range nodes {
		for _, pat := range patterns {
			var cursor uint64
			for {
				if len(res.keys) >= r.opts.Scan.MaxKeys {
					res.truncated, res.why = true, fmt.Sprintf("key cap %d reached", r.opts.Scan.MaxKeys)
					break outer
				}
				if time.Now().After(deadline) {
					res.truncated, res.why = true, fmt.Sprintf("time cap %v reached", r.opts.Scan.MaxTime)
					break outer
				}
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				batch, next, err := n.client.Scan(sctx, cursor, pat, int64(r.opts.Scan.Count)).Result()
				res.calls++
				if err != nil {
					cancel()
					res.fail(fmt.Sprintf("%s: SCAN: %v", n.addr, err), err)
					if classify(ctx, err) == errUnreachable && !slices.ContainsFunc(res.silent, func(s string) bool { return strings.HasPrefix(s, n.addr+" ") }) {
						res.silent = append(res.silent, fmt.Sprintf("%s (%v)", n.addr, err))
					}
					break
				}
				if room := r.opts.Scan.MaxKeys - len(res.keys); len(batch) > room {
					batch = batch[:room]
				}
				res.found += len(batch)
				r.inspect(sctx, n, batch, &res)
				cancel()
				cursor = next
				if cursor == 0 {
					break
				}
				if r.opts.Scan.Pause > 0 {
					select {
					case <-ctx.Done():
						res.fail(ctx.Err().Error(), ctx.Err())
						break outer
					case <-time.After(r.opts.Scan.Pause):
					}
				}
			}
		}
	}
	res.elapsed = time.Since(start)
	return res
}

// inspect reads PTTL (and ZCARD of sorted-set states) of a batch of keys
// on node n, in one pipeline.
func (r *run) inspect(ctx context.Context, n node, batch []string, res *scanResult) {
	if len(batch) == 0 {
		return
	}
	pipe := n.client.Pipeline()
	ttls := make([]*redis.DurationCmd, len(batch))
	cards := make([]*redis.IntCmd, len(batch))
	parsed := make([]parsedKey, len(batch))
	for i, k := range batch {
		parsed[i] = parseKey(r.opts.Prefix, r.opts.LoginPrefix, k)
		ttls[i] = pipe.PTTL(ctx, k)
		if a := parsed[i].alg; parsed[i].kind != kindMarker && (a == "sl" || a == "cc") {
			cards[i] = pipe.ZCard(ctx, k)
		}
	}
	_, _ = pipe.Exec(ctx)
	r.askImporting(ctx, n, batch, parsed, ttls, cards)
	for i, k := range batch {
		ttl, err := ttls[i].Result()
		if err != nil {
			res.fail(fmt.Sprintf("%s: PTTL %s: %v", n.addr, k, err), err)
			continue
		}
		if ttl == -2*time.Nanosecond {
			continue // expired between SCAN and PTTL
		}
		sk := scannedKey{name: k, parsed: parsed[i], pttl: ttl, card: -1, node: n.client}
		if cards[i] != nil {
			if c, err := cards[i].Result(); err == nil {
				sk.card = c
			} else {
				res.cardErrs = append(res.cardErrs, fmt.Sprintf("%s: %v", k, err))
			}
		}
		res.keys = append(res.keys, sk)
	}
}

// askImporting reads again, each after ASKING, the keys of a batch whose
// PTTL node n answered with a redirection: keys SCAN found on n in a slot
// n is importing (a resharding under way, or left half done), which n
// serves only to a command preceded by ASKING. Without it they were
// reported as scan errors.
func (r *run) askImporting(ctx context.Context, n node, batch []string, parsed []parsedKey, ttls []*redis.DurationCmd, cards []*redis.IntCmd) {
	var again []int
	for i := range batch {
		if err := ttls[i].Err(); err != nil && isRedirection(err) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	pipe := n.client.Pipeline()
	for _, i := range again {
		pipe.Do(ctx, "ASKING")
		ttls[i] = pipe.PTTL(ctx, batch[i])
		if cards[i] != nil {
			pipe.Do(ctx, "ASKING")
			cards[i] = pipe.ZCard(ctx, batch[i])
		}
	}
	_, _ = pipe.Exec(ctx)
}

// isRedirection reports a Cluster redirection (MOVED or ASK) error.
func isRedirection(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// keyChecks runs the Keys group on one scan; with Redis unreachable, it
// reports the group skipped.
func (r *run) keyChecks(ctx context.Context) {
	if r.down != nil {
		r.skipped(GroupKeys, "skipped", "no key scanned under "+r.opts.Prefix+":* or {"+r.opts.LoginPrefix+"}:*, so scan, ttl, policies and sliding-logs not run")
		return
	}
	nodes, err := r.primaries(ctx)
	if err != nil && len(nodes) == 0 {
		r.check(GroupKeys, "scan", func(c *Check) {
			c.Status, c.Summary = Fail, "cannot list the primaries: "+err.Error()
		})
		return
	}
	var res scanResult
	r.check(GroupKeys, "scan", func(c *Check) {
		res = r.scan(ctx, nodes)
		r.scanned, r.scannedKeys = true, len(res.keys)
		if err != nil {
			// Some primaries could not be listed: the scan missed their keys.
			res.fail("listing the primaries: "+err.Error(), err)
		}
		c.Read = fmt.Sprintf("SCAN MATCH %s:* and {%s}:* COUNT %d on %s, paced %v between batches, capped at %s and %v; PTTL of each key and ZCARD of sorted sets, pipelined per batch",
			r.opts.Prefix, r.opts.LoginPrefix, r.opts.Scan.Count, plural.Count(len(nodes), "primary", "primaries"), r.opts.Scan.Pause, plural.Count(r.opts.Scan.MaxKeys, "key", "keys"), r.opts.Scan.MaxTime)
		keysRead := plural.Count(len(res.keys), "key", "keys")
		if res.found > len(res.keys) {
			// Keys found whose PTTL failed (CLUSTERDOWN on a node that
			// answered SCAN): found, not read.
			keysRead = fmt.Sprintf("%s found, %d read", plural.Count(res.found, "key", "keys"), len(res.keys))
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s in %s, %v", keysRead, plural.Count(res.calls, "SCAN call", "SCAN calls"), res.elapsed.Round(time.Millisecond)))
		c.Evidence = append(c.Evidence, firstN(res.errs, 5)...)
		switch {
		case len(res.errs) > 0:
			c.Status, c.Summary = Warn, "the scan met "+plural.Count(len(res.errs), "error", "errors")+"; the key checks below saw part of the keys"
			switch {
			case len(res.keys) == 0 && res.found > 0:
				c.Summary = fmt.Sprintf("the scan met %s: it found %s but could read none of them; the key checks below have nothing to judge",
					plural.Count(len(res.errs), "error", "errors"), plural.Count(res.found, "key", "keys"))
			case len(res.keys) == 0:
				c.Summary = "the scan met " + plural.Count(len(res.errs), "error", "errors") + " and read no key; the key checks below have nothing to judge"
			}
			class := classify(ctx, res.firstErr)
			if len(res.silent) > 0 && class == errOther {
				// A primary that did not answer is the finding, whatever
				// error came first (CLUSTERDOWN from those that did).
				class = errUnreachable
			}
			switch class {
			case errNoPerm:
				c.Summary = "Redis refused the scan's reads (" + res.firstErr.Error() + "): " + c.Summary
				c.Fix = permissionFix()
			case errUnreachable:
				c.Status = Fail
				if len(res.silent) > 0 && len(res.silent) < len(nodes) {
					c.Summary = fmt.Sprintf("%d of %s did not answer the scan (%s): %s", len(res.silent), plural.Count(len(nodes), "primary", "primaries"), strings.Join(res.silent, ", "), c.Summary)
				} else {
					c.Summary = "Redis did not answer the scan (" + res.firstErr.Error() + "): " + c.Summary
				}
				c.Fix = unreachableFixOf(res.firstErr)
			case errDeadline:
				c.Status = Fail
				c.Fix = deadlineFix
			default:
				c.Fix = "read the errors above: the scan sends SCAN, PTTL and ZCARD on every primary"
			}
		case res.truncated:
			c.Status, c.Summary = Info, "a sample: "+res.why+"; the key checks below judge the keys seen"
		case len(res.keys) == 0 && len(r.opts.Instances) > 0 && countEnvoy(r.readInstances(ctx)) < len(r.readInstances(ctx)):
			// Running instances write their heartbeats (and their counters)
			// under the prefix: none means they use another one. (Not
			// envoy-compat's ports, whose counters are under no Floodgate
			// prefix: Instances/ready says so.)
			c.Status = Warn
			c.Summary = fmt.Sprintf("no key under %s:* or {%s}:*, though instances are given: the prefix may be wrong (see Instances/redis-and-prefix)", r.opts.Prefix, r.opts.LoginPrefix)
			c.Fix = "give doctor the --prefix (and --login-prefix) the instances run with (serve --prefix), and their Redis"
			if f := redisRefusing(r.readInstances(ctx)); f.any() {
				// Redis refuses the instances (a password or an ACL
				// they lack): they wrote nothing, whatever the prefix.
				c.Summary = fmt.Sprintf("no key under %s:* or {%s}:*, though instances are given: %s; otherwise the prefix may be wrong (see Instances/redis-and-prefix)",
					r.opts.Prefix, r.opts.LoginPrefix, strings.Replace(f.cause(), "heartbeats included", "their counters included", 1))
				c.Evidence = append(c.Evidence, f.lines...)
				c.Fix = f.fix()
			}
		default:
			c.Status, c.Summary = Pass, fmt.Sprintf("scanned every key under the prefixes (%d)", len(res.keys))
		}
	})
	if res.calls == 0 {
		return
	}
	own := owners(r.cfg)
	addEnvoyOwners(own, r.envoy)
	addOverrideOwners(own, r.envoy, res.keys)
	now := r.opts.Now()
	r.check(GroupKeys, "ttl", func(c *Check) { r.checkTTLs(c, res, own, now); partialScan(c, res) })
	r.check(GroupKeys, "policies", func(c *Check) { r.checkPolicies(ctx, c, res, own); partialScan(c, res) })
	r.check(GroupKeys, "sliding-logs", func(c *Check) { r.checkLogs(c, res, own); partialScan(c, res) })
}

// partialScan makes a key check that judged the keys of a scan that
// failed on some reads warn instead of passing: it saw only part of the
// keys, or none.
func partialScan(c *Check, res scanResult) {
	if len(res.errs) == 0 && len(res.keys) == 0 && c.Status == Pass && !res.truncated {
		// Nothing judged is no pass: a re-walk with the wrong --prefix read
		// "every one of 0 keys has a TTL".
		c.Status = Info
		c.Summary = "no key under the prefix: nothing to judge (a new deployment, or another prefix than the instances': see Instances/redis-and-prefix)"
		return
	}
	if res.truncated && len(res.errs) == 0 && c.Status == Pass {
		// A capped scan is a sample: the pass is about the keys seen
		// (a walk read "every one of 10000 keys has a TTL" after the
		// scan stopped at its cap).
		c.Summary = fmt.Sprintf("of the %s sampled: %s; the scan stopped (%s: --scan-max-keys, --scan-max-time), so keys beyond were not checked",
			plural.Count(len(res.keys), "key", "keys"), c.Summary, res.why)
	}
	if len(res.errs) == 0 || c.Status > Pass {
		return
	}
	c.Status = Warn
	if len(res.keys) == 0 {
		c.Summary = "not checked: the scan read no key (see scan: " + res.firstErr.Error() + ")"
	} else {
		c.Summary = fmt.Sprintf("only part of the keys checked, the scan failed on some reads (see scan: %v): %s", res.firstErr, c.Summary)
	}
	c.Fix = "fix what stopped the scan (see the scan check) and run doctor again"
}

// maxListed is the most names a configuration check lists in one
// evidence line (or lines), the rest counted: "… 987 more".
const maxListed = 10

// firstN returns s's first n items and, when there are more, "… N more".
func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string(nil), s[:n]...), fmt.Sprintf("… %d more", len(s)-n))
}

// ownerOf returns the configured owner of a parsed key, or nil.
func ownerOf(own map[string]*owner, p parsedKey) *owner {
	return own[p.owner+"/"+p.alg]
}

func (r *run) checkTTLs(c *Check, res scanResult, own map[string]*owner, now time.Time) {
	c.Read = "the PTTLs read by the scan (no extra command)"
	var immortal, long []string
	for _, k := range res.keys {
		switch k.parsed.kind {
		case kindConfig, kindTiers:
			continue // meant to live for ever
		}
		if k.pttl == -1*time.Nanosecond || k.pttl == -1*time.Millisecond {
			immortal = append(immortal, k.name)
			continue
		}
		if k.pttl < 0 {
			continue
		}
		var bound time.Duration
		switch k.parsed.kind {
		case kindMarker:
			bound = markerTTL + ttlSlack
		case kindProbe:
			bound = probeTTL + ttlSlack
		case kindFleet:
			bound = fleetTTL + ttlSlack
		case kindRate, kindQuotaLayer, kindBilling, kindLease, kindJournal:
			if o := ownerOf(own, k.parsed); o != nil {
				bound = o.maxTTL(now)
			}
		}
		// Allow 10% and 2s beyond the bound for the time between the write
		// and this read, and for clock differences.
		if bound > 0 && k.pttl > bound+bound/10+2*time.Second {
			long = append(long, fmt.Sprintf("%s: TTL %v, policy allows at most %v", k.name, k.pttl.Round(time.Second), bound.Round(time.Second)))
		}
	}
	sort.Strings(immortal)
	if len(immortal) > 0 {
		c.Evidence = append(c.Evidence, plural.Count(len(immortal), "key", "keys")+" without a TTL: "+strings.Join(firstN(immortal, 5), ", "))
	}
	if len(long) > 0 {
		sort.Strings(long)
		c.Evidence = append(c.Evidence, plural.Count(len(long), "key with a TTL longer than its policy justifies:", "keys with a TTL longer than their policy justifies:"))
		c.Evidence = append(c.Evidence, firstN(long, 5)...)
	}
	switch {
	case len(immortal) > 0:
		c.Status = Fail
		c.Summary = plural.Count(len(immortal), "key under the prefix has no TTL: it never expires, so its identity keeps", "keys under the prefix have no TTL: they never expire, so their identities keep") +
			" old counts (or a lockout) for ever and memory only grows"
		c.Fix = "Floodgate's scripts set the TTL with every write, so something else wrote these (a manual SET, a PERSIST, another tool sharing the prefix): find it, then EXPIRE or DEL the keys listed"
	case len(long) > 0:
		c.Status = Warn
		c.Summary = plural.Count(len(long), "key lives longer than its policy needs", "keys live longer than their policy needs")
		c.Fix = "a policy whose window shrank keeps its old keys until they expire, which is harmless; otherwise another writer sets these TTLs: find it"
	default:
		c.Status = Pass
		c.Summary = "every one of " + plural.Count(len(res.keys), "key", "keys") + " has a TTL within its policy's bound"
		if len(res.keys) == 1 {
			c.Summary = "the 1 key has a TTL within its policy's bound"
		}
	}
}

// ownerStats is one owner's share of the scanned keys.
type ownerStats struct {
	label   string
	keys    int
	sampled int
	memory  int64 // sum of MEMORY USAGE of the sampled keys
	members int64 // sum of ZCARD
}

func (r *run) checkPolicies(ctx context.Context, c *Check, res scanResult, own map[string]*owner) {
	stats := map[string]*ownerStats{}
	var unknown, stale []string
	staleOwners := map[string]int{}
	envoyLike := 0 // stale keys whose owner has an envoyrls-derived name
	byOwner := map[string][]int{}
	for i, k := range res.keys {
		label := ""
		switch k.parsed.kind {
		case kindUnknown:
			unknown = append(unknown, k.name)
			label = "(no known format)"
		case kindDemo:
			unknown = append(unknown, k.name)
			label = "incident demo"
		case kindConfig:
			label = "configuration document"
		case kindTiers:
			label = "tier assignments"
		case kindLogin:
			label = "login guard"
		case kindMarker:
			label = "release markers"
		case kindJournal:
			label = "release journals"
		case kindProbe:
			label = "breaker probe"
		case kindFleet:
			label = "instance heartbeats"
		default:
			label = k.parsed.owner + " (" + k.parsed.alg + ")"
			if (r.cfg != nil || r.envoy != nil) && ownerOf(own, k.parsed) == nil {
				staleOwners[label]++
				stale = append(stale, k.name)
				if envoyDerivedName.MatchString(k.parsed.owner) {
					envoyLike++
				}
			}
		}
		st := stats[label]
		if st == nil {
			st = &ownerStats{label: label}
			stats[label] = st
		}
		st.keys++
		if k.card > 0 {
			st.members += k.card
		}
		byOwner[label] = append(byOwner[label], i)
	}
	// MEMORY USAGE on a sample spread over the owners.
	labels := make([]string, 0, len(stats))
	for l := range stats {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	per := 1
	if len(labels) > 0 {
		per = max(1, r.opts.Scan.MemorySamples/len(labels))
	}
	sampled := 0
	type sample struct {
		label string
		cmd   *redis.IntCmd
	}
	pipes := map[*redis.Client]redis.Pipeliner{}
	var samples []sample
	for _, l := range labels {
		for _, i := range byOwner[l] {
			if stats[l].sampled >= per || sampled >= r.opts.Scan.MemorySamples {
				break
			}
			k := res.keys[i]
			p := pipes[k.node]
			if p == nil {
				p = k.node.Pipeline()
				pipes[k.node] = p
			}
			samples = append(samples, sample{l, p.MemoryUsage(ctx, k.name)})
			stats[l].sampled++
			sampled++
		}
	}
	for _, p := range pipes {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _ = p.Exec(pctx)
		cancel()
	}
	for _, s := range samples {
		if v, err := s.cmd.Result(); err == nil {
			stats[s.label].memory += v
		}
	}
	c.Read = "the scan's key names; MEMORY USAGE on " + plural.Count(sampled, "sampled key", "sampled keys") + ", pipelined"
	sort.Slice(labels, func(i, j int) bool { return stats[labels[i]].keys > stats[labels[j]].keys })
	for _, l := range labels {
		st := stats[l]
		line := l + ": " + plural.Count(st.keys, "key", "keys")
		if st.sampled > 0 && st.memory > 0 {
			avg := st.memory / int64(st.sampled)
			line += fmt.Sprintf(", ~%s each (MEMORY USAGE of %d), ~%s in all", formatBytes(avg), st.sampled, formatBytes(avg*int64(st.keys)))
		}
		if st.members > 0 {
			line += ", " + plural.Count(st.members, "sorted-set member", "sorted-set members")
		}
		c.Evidence = append(c.Evidence, line)
	}
	c.Evidence = firstN(c.Evidence, 15)
	hot, gets := r.hotIdentities(ctx, res, own)
	if len(hot) > 0 {
		c.Evidence = append(c.Evidence, "identities at or near the default tier's limit: "+strings.Join(firstN(hot, 5), "; "))
	}
	if gets > 0 {
		// Name every command the count below adds up.
		c.Read = "the scan's key names; MEMORY USAGE on " + plural.Count(sampled, "sampled key", "sampled keys") +
			" and GET of " + plural.Count(gets, "window counter", "window counters") +
			" (fixed and sliding windows: the identities near their limit), pipelined"
	}
	switch {
	case len(unknown) > 0 || len(stale) > 0:
		c.Status = Warn
		var parts []string
		if len(unknown) > 0 {
			sort.Strings(unknown)
			parts = append(parts, fmt.Sprintf("%s of no Floodgate format (e.g. %s)", plural.Count(len(unknown), "key", "keys"), strings.Join(firstN(unknown, 3), ", ")))
		}
		if len(stale) > 0 {
			var names []string
			for n, k := range staleOwners {
				names = append(names, fmt.Sprintf("%s ×%d", n, k))
			}
			sort.Strings(names)
			parts = append(parts, fmt.Sprintf("%s the configuration does not define (%s)", plural.Count(len(stale), "key of a policy", "keys of policies"), strings.Join(firstN(names, 5), ", ")))
		}
		c.Summary = "keys of no known policy under the prefix: " + strings.Join(parts, "; ")
		c.Fix = "keys of a removed or renamed policy expire by their TTL; keys of no Floodgate format mean another application shares the prefix: give Floodgate its own prefix (serve --prefix) or its own database"
		if envoyLike > 0 {
			if r.envoy == nil {
				c.Summary += fmt.Sprintf("; %d of them are named as Envoy descriptors' keys are (serve --envoy-config): pass doctor the same --envoy-config to match them", envoyLike)
			} else {
				c.Summary += fmt.Sprintf("; %d of them are named as Envoy descriptors' keys are: of descriptors (or of limit overrides in domains) no longer in --envoy-config", envoyLike)
			}
		}
	case r.cfg == nil:
		c.Status = Info
		c.Summary = fmt.Sprintf("%s by owner; no configuration to match %s against (%v)", plural.Count(len(res.keys), "key", "keys"), plural.Word(len(res.keys), "it", "them"), r.cfgErr)
	default:
		c.Status = Pass
		c.Summary = fmt.Sprintf("every key belongs to a configured policy (%s)", plural.Count(len(labels), "owner", "owners"))
	}
}

// hotIdentities reads the state of the sampled window counters (GET of
// fixed and sliding window keys) and the sliding logs' sizes, and returns
// the identities whose count is at 90% or more of the default tier's
// limit, fullest first, and the number of GETs it sent.
func (r *run) hotIdentities(ctx context.Context, res scanResult, own map[string]*owner) ([]string, int) {
	type hot struct {
		line string
		frac float64
	}
	var out []hot
	pipes := map[*redis.Client]redis.Pipeliner{}
	type get struct {
		k   scannedKey
		o   *owner
		cmd *redis.StringCmd
	}
	var gets []get
	n := 0
	for _, k := range res.keys {
		o := ownerOf(own, k.parsed)
		if o == nil || o.limit <= 0 || k.parsed.kind != kindRate {
			continue
		}
		switch k.parsed.alg {
		case "sl":
			if k.card >= 0 {
				if f := float64(k.card) / float64(o.limit); f >= 0.9 {
					out = append(out, hot{fmt.Sprintf("%s %s: %d of %d in the log", o.name, k.parsed.identity, k.card, o.limit), f})
				}
			}
		case "fw", "sw":
			if n >= r.opts.Scan.MemorySamples {
				continue
			}
			p := pipes[k.node]
			if p == nil {
				p = k.node.Pipeline()
				pipes[k.node] = p
			}
			gets = append(gets, get{k, o, p.Get(ctx, k.name)})
			n++
		}
	}
	for _, p := range pipes {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _ = p.Exec(pctx)
		cancel()
	}
	for _, g := range gets {
		v, err := g.cmd.Result()
		if err != nil {
			continue
		}
		cnt, ok := windowCount(v)
		if !ok {
			continue
		}
		if fr := float64(cnt) / float64(g.o.limit); fr >= 0.9 {
			out = append(out, hot{fmt.Sprintf("%s %s: %d of %d this window", g.o.name, g.k.parsed.identity, cnt, g.o.limit), fr})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].frac > out[j].frac })
	lines := make([]string, len(out))
	for i, h := range out {
		lines[i] = h.line
	}
	return lines, len(gets)
}

// windowCount returns the count of a fixed or sliding window state as
// redisstore writes it: in text, "start count [previous]"; in binary
// (redisstore.BinaryState), a tag byte (1 fixed window, 3 sliding window)
// and three or four little-endian doubles, start, count [, previous],
// window length.
func windowCount(v string) (int64, bool) {
	if (len(v) == 25 && v[0] == 1) || (len(v) == 33 && v[0] == 3) {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[9:17])))
		if f < 0 || f >= 1<<53 || f != math.Trunc(f) {
			return 0, false
		}
		return int64(f), true
	}
	f := strings.Fields(v)
	if len(f) < 2 {
		return 0, false
	}
	cnt, err := strconv.ParseInt(f[1], 10, 64)
	return cnt, err == nil
}

// bigLog is the member count from which a sorted-set state is worth a
// warning: about 1 MB of memory.
const bigLog = 10_000

func (r *run) checkLogs(c *Check, res scanResult, own map[string]*owner) {
	c.Read = "the ZCARDs read by the scan (no extra command)"
	var logs []scannedKey
	for _, k := range res.keys {
		if k.card >= 0 {
			logs = append(logs, k)
		}
	}
	defer func() {
		// A set whose ZCARD failed was not judged: the check does not
		// pass on the others (a walk read "no sliding-log or lease sets"
		// after a ZCARD of an :sl: key failed with WRONGTYPE).
		if len(res.cardErrs) == 0 || c.Status > Pass {
			return
		}
		c.Status = Warn
		c.Evidence = append(c.Evidence, "ZCARD failed on "+plural.Count(len(res.cardErrs), "key", "keys")+": "+strings.Join(firstN(res.cardErrs, 3), "; "))
		c.Summary = fmt.Sprintf("the size of %s named as %s is unknown, %s ZCARD failed (see the evidence); of the others: %s",
			plural.Count(len(res.cardErrs), "key", "keys"), plural.Word(len(res.cardErrs), "a sliding log or lease set", "sliding logs or lease sets"),
			plural.Word(len(res.cardErrs), "its", "their"), c.Summary)
		c.Fix = "a key of another type under a sliding log's or lease set's name (WRONGTYPE) was written by something other than Floodgate (a manual SET, another application sharing the prefix): find the writer, then delete the key; give Floodgate its own prefix (serve --prefix) or database"
	}()
	if len(logs) == 0 {
		c.Status, c.Summary = Pass, "no sliding-log or lease sets among the keys seen"
		return
	}
	sort.Slice(logs, func(i, j int) bool { return logs[i].card > logs[j].card })
	big := 0
	for i, k := range logs {
		if k.card >= bigLog {
			big++
		}
		if i < 5 {
			line := k.name + ": " + plural.Count(k.card, "member", "members")
			switch k.parsed.alg {
			case "cc":
				line += ", a concurrency limit's lease set"
			case "sl":
				line += ", a sliding log"
			}
			if o := ownerOf(own, k.parsed); o != nil && o.limit > 0 {
				line += fmt.Sprintf(" (limit %d)", o.limit)
			}
			c.Evidence = append(c.Evidence, line)
		}
	}
	if big > 0 {
		c.Status = Warn
		c.Summary = fmt.Sprintf("%s %d or more members (about 1 MB each, and every decision on %s does O(log n) work)", plural.Count(big, "sorted set holds", "sorted sets hold"), bigLog, plural.Word(big, "it", "them"))
		c.Fix = "a sliding log keeps one member per admitted request: for large limits use sliding_window (two counters, about as exact) instead"
		return
	}
	c.Status = Pass
	c.Summary = "1 sorted set, with " + plural.Count(logs[0].card, "member", "members")
	if len(logs) > 1 {
		c.Summary = fmt.Sprintf("%d sorted sets, the largest with %s", len(logs), plural.Count(logs[0].card, "member", "members"))
	}
}
