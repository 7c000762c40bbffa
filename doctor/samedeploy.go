package doctor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/fleet"
	"github.com/floodgate-rl/floodgate/internal/plural"
)

// short returns the first 8 hex digits of a hash, for people.
func short(h string) string {
	if len(h) > 8 {
		return h[:8] + "…"
	}
	return h
}

// differentContents returns, for each configuration version that the
// instances run with more than one document (their /readyz config_hash
// differs), an evidence line naming each hash and its instances; nil
// when every version has one document (or the hashes are unknown).
func differentContents(ins []*instance) []string {
	byVersion := map[string]map[string][]string{}
	for _, in := range ins {
		if in.notFloodgate != "" || in.readyStatus == 0 || in.configHash == "" {
			continue
		}
		if byVersion[in.configVersion] == nil {
			byVersion[in.configVersion] = map[string][]string{}
		}
		byVersion[in.configVersion][in.configHash] = append(byVersion[in.configVersion][in.configHash], in.url)
	}
	var out []string
	for v, hashes := range byVersion {
		if len(hashes) < 2 {
			continue
		}
		var parts []string
		for h, urls := range hashes {
			parts = append(parts, fmt.Sprintf("hash %s on %s", short(h), strings.Join(urls, ", ")))
		}
		sort.Strings(parts)
		out = append(out, fmt.Sprintf("version %q has %d different documents: %s", v, len(hashes), strings.Join(parts, "; ")))
	}
	sort.Strings(out)
	return out
}

// sameHash returns the configuration hash every instance that reports one
// runs, or "" when none reports one or they differ.
func sameHash(ins []*instance) string {
	h := ""
	for _, in := range ins {
		if in.configHash == "" || in.notFloodgate != "" {
			continue
		}
		if h != "" && in.configHash != h {
			return ""
		}
		h = in.configHash
	}
	return h
}

// outsideTheSet compares the instances given that decide on Redis with
// the live heartbeats of fleetKey (live, beats of them). odd has a line
// for each instance outside the set: one whose /readyz heartbeat_id is
// not in it (certain is then set), or, from a version that reports no id,
// one whose floodgate_instances_live differs from beats. notGiven names
// the live heartbeats of no instance given, sorted; it is nil when some
// instance reported no id (which heartbeat is whose is then unknown).
func outsideTheSet(ins []*instance, live map[string]bool, beats int64, fleetKey string) (odd []string, certain bool, notGiven []string) {
	given := map[string]bool{}
	allIDs := true
	for _, in := range ins {
		if in.notFloodgate != "" || in.readyStatus == 0 || in.store == "memory" {
			continue
		}
		n, counted := sum(in.metrics, metricInstancesLive, nil)
		counts := fmt.Sprintf("it counts %s", plural.Count(int64(n), "live instance", "live instances"))
		switch {
		case in.heartbeatID != "":
			given[in.heartbeatID] = true
			if live[in.heartbeatID] {
				continue
			}
			certain = true
			line := fmt.Sprintf("%s: its heartbeat %s is not among the %d live in %s", in.url, in.heartbeatID, beats, fleetKey)
			if counted {
				line += "; " + counts
			}
			odd = append(odd, line)
		default:
			allIDs = false
			if counted && int64(n) != beats {
				odd = append(odd, fmt.Sprintf("%s: %s, %s holds %d (its /readyz names no heartbeat_id, an older version; a join or a leave in the last 2 s explains a difference too)",
					in.url, counts, fleetKey, beats))
			}
		}
	}
	if !allIDs {
		return odd, certain, nil
	}
	notGiven = []string{}
	for id := range live {
		if !given[id] {
			notGiven = append(notGiven, id)
		}
	}
	sort.Strings(notGiven)
	return odd, certain, notGiven
}

// staleBeat is the age past which a heartbeat (beating every 2 s) is taken
// for an instance that stopped.
const staleBeat = 3 * time.Second

// checkSameRedis checks that the instances decide on the Redis and under
// the prefix doctor audits: the prefix of a configuration they read from
// Redis (/readyz config_source "redis:<prefix>:config"), and their
// heartbeats in <prefix>:instances (package fleet: one member per live
// instance), which serve writes every 2s.
func (r *run) checkSameRedis(ctx context.Context, c *Check, ins []*instance) {
	fleetKey := fleet.Key(r.opts.Prefix)
	c.Read = "ZRANGE " + fleetKey + " 0 -1 WITHSCORES and TIME, the config_source of the instances' /readyz and the primaries' INFO memory already read"
	onRedis := 0
	var traffic float64
	var otherPrefix []string
	for _, in := range ins {
		if in.notFloodgate != "" || in.readyStatus == 0 || in.store == "memory" {
			continue
		}
		onRedis++
		if a, ok := sum(in.metrics, metricAllowed, nil); ok {
			traffic += a
		}
		if d, ok := sum(in.metrics, metricDenied, nil); ok {
			traffic += d
		}
		if p, ok := strings.CutPrefix(in.configSource, "redis:"); ok {
			if p, ok = strings.CutSuffix(p, ":config"); ok && p != r.opts.Prefix {
				otherPrefix = append(otherPrefix, fmt.Sprintf("%s reads its configuration from %s:config: its --prefix is %q, not %q", in.url, p, p, r.opts.Prefix))
			}
		}
	}
	if onRedis == 0 {
		c.Status, c.Summary = Info, "no instance that answered decides on Redis: nothing to compare"
		return
	}
	if r.down != nil {
		// Only the instances' own answers can be judged.
		c.Read = "the config_source of the instances' /readyz already read (" + fleetKey + " not read: Redis is unreachable)"
		c.Evidence = append(c.Evidence, otherPrefix...)
		if len(otherPrefix) > 0 {
			c.Status = Fail
			c.Summary = fmt.Sprintf("the instances use another prefix than %q; their heartbeats in %s not read: Redis is unreachable (see Redis/reachable)", r.opts.Prefix, fleetKey)
			c.Fix = "give doctor the Redis and the prefix the instances run with (serve --redis, --redis-sentinel or --redis-cluster, and --prefix)"
			return
		}
		c.Status = Info
		c.Summary = fmt.Sprintf("skipped, Redis is unreachable (see Redis/reachable): the heartbeats in %s not read, so whether the instances decide on this Redis is unknown", fleetKey)
		return
	}
	zctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	members, err := r.client.ZRangeWithScores(zctx, fleetKey, 0, -1).Result()
	var now time.Time
	if err == nil {
		now, err = r.client.Time(zctx).Result()
	}
	cancel()
	if err != nil {
		c.Status, c.Summary = Warn, fmt.Sprintf("could not read %s (%v): whether the instances use this Redis is unknown", fleetKey, err)
		return
	}
	// A heartbeat is scored with the Redis time of its last beat (every
	// 2 s); one older than staleBeat stopped: an instance that ended
	// without leaving (killed), whose member stays until the others'
	// beats drop it, 6 s after its last beat. It is no live instance.
	var beats int64
	type staleMember struct{ id, line string }
	var stale []staleMember
	live := map[string]bool{}
	for _, m := range members {
		age := now.Sub(time.UnixMilli(int64(m.Score)))
		if age > staleBeat {
			id := fmt.Sprint(m.Member)
			stale = append(stale, staleMember{id, fmt.Sprintf("%s (last beat %.1f s ago)", id, age.Seconds())})
			continue
		}
		beats++
		live[fmt.Sprint(m.Member)] = true
	}
	unanswered := 0
	answered := map[string]bool{} // the heartbeat ids of the instances that answered
	for _, in := range ins {
		if in.readyStatus == 0 {
			unanswered++
		} else if in.heartbeatID != "" {
			answered[in.heartbeatID] = true
		}
	}
	full := r.refusingWrites()
	// refusedIns are the instances whose /readyz names a Redis refusing
	// their commands (NOAUTH, NOPERM, ...) or an open breaker: a walk's
	// Redis, restarted with a password the instances lacked, got "they
	// decide on another Redis or under another --prefix".
	refusedIns := redisRefusing(ins)
	blocked := map[string]bool{} // the heartbeat ids of the instances refused
	for _, in := range ins {
		if in.heartbeatID != "" && redisRefusing([]*instance{in}).any() {
			blocked[in.heartbeatID] = true
		}
	}
	// staleNote names the heartbeats that stopped. While Redis refuses
	// writes, that of an instance that answered doctor stopped because
	// its beats are refused, and none is dropped (the pruning is a write
	// too): a walk saw a live instance's heartbeat called "such as one
	// killed: it is dropped 6 s after its last beat".
	var killed, refused, blockedBeats []string
	for _, m := range stale {
		switch {
		case len(full) > 0 && answered[m.id]:
			refused = append(refused, m.line)
		case blocked[m.id]:
			blockedBeats = append(blockedBeats, m.line)
		default:
			killed = append(killed, m.line)
		}
	}
	staleNote := ""
	switch {
	case len(killed) > 0 && len(full) > 0:
		staleNote = fmt.Sprintf("; %s stopped beating (an instance that ended without leaving, such as one killed; it stays in the set while Redis refuses writes, as dropping it is a write): %s",
			plural.Count(len(killed), "heartbeat", "heartbeats"), strings.Join(killed, ", "))
	case len(killed) > 0:
		staleNote = fmt.Sprintf("; %s stopped beating (an instance that ended without leaving, such as one killed: it is dropped 6 s after its last beat): %s",
			plural.Count(len(killed), "heartbeat", "heartbeats"), strings.Join(killed, ", "))
	}
	if len(refused) > 0 {
		staleNote += fmt.Sprintf("; %s of %s that answered doctor stopped beating because Redis refuses writes, its beats included: %s",
			plural.Count(len(refused), "heartbeat", "heartbeats"), plural.Word(len(refused), "an instance", "instances"), strings.Join(refused, ", "))
	}
	if len(blockedBeats) > 0 {
		staleNote += fmt.Sprintf("; %s of %s that answered doctor stopped beating because Redis refuses %s commands (see Instances/ready): %s",
			plural.Count(len(blockedBeats), "heartbeat", "heartbeats"), plural.Word(len(blockedBeats), "an instance", "instances"),
			plural.Word(len(blockedBeats), "its", "their"), strings.Join(blockedBeats, ", "))
	}
	// The set's content as read: a walk read "holds 0 live instance
	// heartbeats" beside a stopped one named, and took the set for empty.
	held := plural.Count(beats, "live instance heartbeat", "live instance heartbeats")
	if len(stale) > 0 {
		held += fmt.Sprintf(" and %s", plural.Count(len(stale), "stopped one", "stopped ones"))
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("%s holds %s on this Redis; %s on Redis answered", fleetKey,
		held, plural.Count(onRedis, "instance", "instances")))
	c.Evidence = append(c.Evidence, refusedIns.lines...)
	// noBeats opens the summary of a set without a live heartbeat: "no
	// live one" when it holds stopped ones.
	noBeats := "no instance heartbeats in " + fleetKey
	if len(stale) > 0 {
		noBeats = fmt.Sprintf("no live instance heartbeat in %s (only %s)", fleetKey, plural.Count(len(stale), "stopped one", "stopped ones"))
	}
	c.Evidence = append(c.Evidence, otherPrefix...)
	odd, certain, notGiven := outsideTheSet(ins, live, beats, fleetKey)
	c.Evidence = append(c.Evidence, odd...)
	noKeys := r.scanned && r.scannedKeys == 0
	if noKeys {
		c.Evidence = append(c.Evidence, fmt.Sprintf("the scan found no key under %s: while the instances have decided %.0f requests", r.opts.Prefix, traffic))
	}
	// notGivenNote names the heartbeats of instances doctor was not given
	// (known when every instance given on Redis reported its id).
	notGivenNote := ""
	if len(notGiven) > 0 {
		notGivenNote = fmt.Sprintf("; %s of instances doctor was not given, and did not audit (give each with --instance): %s",
			plural.Count(len(notGiven), "heartbeat", "heartbeats"), strings.Join(notGiven, ", "))
		if unanswered > 0 {
			// A given instance killed in the last 3 s still looks live.
			notGivenNote += fmt.Sprintf(", or of %s given that did not answer and stopped in the last %v", plural.Count(unanswered, "instance", "instances"), staleBeat)
		}
	}
	const fix = "give doctor the Redis and the prefix the instances run with (serve --redis, --redis-sentinel or --redis-cluster, and --prefix): doctor audited another Redis or another prefix than theirs"
	switch {
	case len(otherPrefix) > 0:
		c.Status = Fail
		c.Summary = fmt.Sprintf("the instances use another prefix than %q: doctor audited keys they do not use", r.opts.Prefix)
		c.Fix = fix
	case beats == 0 && len(full) > 0:
		// A walk's Redis, filled past maxmemory under noeviction, refused
		// every heartbeat and let the set expire; doctor blamed its own
		// --redis and --prefix.
		c.Status = Fail
		c.Summary = fmt.Sprintf("%s on this Redis though %s %s: Redis refuses writes (noeviction at maxmemory, see Redis/memory), heartbeats included, which likely explains it; otherwise they decide on another Redis or under another --prefix",
			noBeats, plural.Count(onRedis, "instance", "instances"), plural.Word(onRedis, "answers", "answer"))
		c.Evidence = append(c.Evidence, full...)
		c.Fix = "free memory or raise maxmemory (see Redis/memory), then run doctor again: serve's heartbeats return within 2 s; if they do not, give doctor the Redis and the prefix the instances run with (serve --redis, --redis-sentinel or --redis-cluster, and --prefix)"
	case beats == 0 && refusedIns.any():
		c.Status = Fail
		c.Summary = fmt.Sprintf("%s on this Redis though %s %s: %s; otherwise they decide on another Redis or under another --prefix",
			noBeats, plural.Count(onRedis, "instance", "instances"), plural.Word(onRedis, "answers", "answer"), refusedIns.cause())
		c.Fix = refusedIns.fix()
	case beats == 0 && (noKeys || traffic > 0):
		c.Status = Fail
		c.Summary = fmt.Sprintf("%s on this Redis though %s %s: they decide on another Redis or under another --prefix", noBeats, plural.Count(onRedis, "instance", "instances"), plural.Word(onRedis, "answers", "answer"))
		c.Fix = fix
	case beats == 0:
		c.Status = Warn
		c.Summary = fmt.Sprintf("%s on this Redis though %s %s: they may decide on another Redis or under another --prefix", noBeats, plural.Count(onRedis, "instance", "instances"), plural.Word(onRedis, "answers", "answer"))
		c.Fix = fix
	case len(odd) > 0:
		// Some instances are in the set and some not: the odd ones run
		// with another --prefix or Redis, not doctor (a walk's fourth
		// instance under fgx was reported as "3 heartbeats in
		// fg:instances for 4 instances given", with a fix blaming
		// doctor's flags).
		c.Status = Warn
		if certain {
			c.Status = Fail
		}
		c.Summary = fmt.Sprintf("%d of the %s given %s outside %s (%s): %s --prefix or Redis likely differs from the others'",
			len(odd), plural.Count(onRedis, "instance", "instances"), plural.Word(len(odd), "is", "are"), fleetKey,
			plural.Count(beats, "live heartbeat", "live heartbeats"), plural.Word(len(odd), "its", "their"))
		c.Fix = "start the instances named with the Redis and --prefix of the instances whose heartbeats are in " + fleetKey +
			" and restart them: each keeps counters of its own (a limit is admitted once more through it), and its fallback divides limits by the instances it counts"
	case beats < int64(onRedis) && refusedIns.any():
		c.Status = Warn
		c.Summary = fmt.Sprintf("%s in %s for %s given: %s; otherwise some of them may decide on another Redis or under another --prefix",
			plural.Count(beats, "heartbeat", "heartbeats"), fleetKey, plural.Count(onRedis, "instance", "instances"), refusedIns.cause())
		c.Fix = refusedIns.fix()
	case beats < int64(onRedis):
		c.Status = Warn
		c.Summary = fmt.Sprintf("%s in %s for %s given: some of them may decide on another Redis or under another --prefix", plural.Count(beats, "heartbeat", "heartbeats"), fleetKey, plural.Count(onRedis, "instance", "instances"))
		c.Fix = fix
	default:
		c.Status = Pass
		c.Summary = fmt.Sprintf("the instances heartbeat into this Redis under prefix %q (%s)", r.opts.Prefix, plural.Count(beats, "live instance", "live instances"))
		if extra := beats - int64(onRedis); extra > 0 && notGiven == nil {
			// A re-walk's third instance, running another document under
			// the same version, went unseen.
			c.Summary += fmt.Sprintf("; %s than the %s given that answered, which doctor did not audit (give each with --instance)",
				plural.Count(extra, "more", "more"), plural.Count(onRedis, "instance", "instances"))
			if unanswered > 0 {
				// A given instance killed in the last 3 s still looks live.
				c.Summary += fmt.Sprintf(", or %s given that did not answer and stopped in the last %v", plural.Count(unanswered, "instance", "instances"), staleBeat)
			}
		}
	}
	if beats > 0 {
		c.Summary += notGivenNote
	}
	c.Summary += staleNote
}

// runSigned reports whether instances whose configuration hash is hash
// run the --config file signed: the document under <prefix>:config (read
// with one GETRANGE, bounded to config.MaxSize bytes) hashes to hash, and
// without its signature line it is the file, byte for byte (but for the
// final newline config.Sign adds to a file without one). The instances'
// hash covers the signature line, the file's does not, so a signed fleet
// given the file it runs differed otherwise. It reads nothing, and
// returns false, without a --config file or with Redis unreachable.
func (r *run) runSigned(ctx context.Context, c *Check, hash string) bool {
	if r.opts.ConfigFile == "" || r.down != nil {
		return false
	}
	keys, err := config.KeysFor(r.opts.Prefix)
	if err != nil {
		return false
	}
	c.Read = strings.TrimSuffix(c.Read, " (no extra request)") + ", and GETRANGE " + keys.Config + " (one Redis command: is the instances' document the file, signed?)"
	file, err := os.ReadFile(r.opts.ConfigFile)
	if err != nil {
		return false
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stored, err := r.client.GetRange(gctx, keys.Config, 0, config.MaxSize).Bytes()
	if err != nil || len(stored) == 0 {
		return false
	}
	if sum := sha256.Sum256(stored); hex.EncodeToString(sum[:]) != hash {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s holds another document (hash %s), not the instances'", keys.Config, short(hex.EncodeToString(sum[:]))))
		return false
	}
	body := config.Unsigned(stored)
	if len(body) == len(stored) {
		return false // not signed: the instances run another document
	}
	if len(file) > 0 && file[len(file)-1] != '\n' {
		file = append(file, '\n')
	}
	if !bytes.Equal(body, file) {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s holds the instances' document, signed, but without its signature line it is not %s", keys.Config, r.opts.ConfigFile))
		return false
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("%s holds the instances' document (hash %s): %s with a signature line", keys.Config, short(hash), r.opts.ConfigFile))
	return true
}
