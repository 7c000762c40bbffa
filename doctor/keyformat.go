package doctor

import (
	"regexp"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/fleet"
)

// keyKind is what a key under the prefix holds, read from its name.
type keyKind uint8

const (
	kindUnknown    keyKind = iota
	kindRate               // prefix:policy.layer:{fw,sl,sw,tb,gc}:{id}
	kindQuotaLayer         // prefix:policy.layer:qt:{id}:tag
	kindBilling            // prefix:quota:q:{id}:tag:{u,h,s,k} (package quota)
	kindLease              // prefix:limit:cc:{id} (package concurrency)
	kindMarker             // <a decision key>:rel:<hex>, a split decision's release marker
	kindConfig             // prefix:config, the shared configuration document
	kindTiers              // prefix:tiers, the tier assignments
	kindLogin              // {loginprefix}:{a,i,p}:id (package loginguard)
	kindDemo               // prefix:naive:{id}, the incident demo's naive counter
	kindProbe              // prefix:probe, or prefix:probe:{N} on a Cluster primary: the breaker's background probe key (fallback.RedisProbe)
	kindFleet              // prefix:instances, the instances' heartbeats (package fleet)
	kindJournal            // <a tb or gc decision key>:rq, a bucket's release journal (redisstore)
)

// parsedKey is a key's name taken apart.
type parsedKey struct {
	kind     keyKind
	owner    string // policy.layer, quota or concurrency limit name
	alg      string // fw, sl, sw, tb, gc, qt, q, cc
	identity string // the encoded identity inside the hash tag
}

var markerSuffix = regexp.MustCompile(`:rel:[0-9a-f]+$`)

// parseKey reads a key's name under prefix (and the login guard's
// loginPrefix), following the formats of floodgate.Key, quota, concurrency,
// loginguard, config.KeysFor and the split decisions' release markers.
func parseKey(prefix, loginPrefix, key string) parsedKey {
	if key == prefix+":config" {
		return parsedKey{kind: kindConfig}
	}
	if key == prefix+":tiers" {
		return parsedKey{kind: kindTiers}
	}
	if key == prefix+":probe" || isClusterProbe(prefix, key) {
		return parsedKey{kind: kindProbe}
	}
	if key == fleet.Key(prefix) {
		return parsedKey{kind: kindFleet}
	}
	if lp := "{" + loginPrefix + "}:"; strings.HasPrefix(key, lp) {
		rest := key[len(lp):]
		if len(rest) > 2 && (rest[:2] == "a:" || rest[:2] == "i:" || rest[:2] == "p:") {
			return parsedKey{kind: kindLogin, owner: "login guard " + rest[:1], identity: rest[2:]}
		}
		return parsedKey{}
	}
	rest, ok := strings.CutPrefix(key, prefix+":")
	if !ok {
		return parsedKey{}
	}
	if inner, ok := strings.CutSuffix(key, ":rq"); ok {
		// A token bucket's or GCRA's release journal: the key's TTL.
		p := parseKey(prefix, loginPrefix, inner)
		if p.kind == kindRate && (p.alg == "tb" || p.alg == "gc") {
			p.kind = kindJournal
			return p
		}
		return parsedKey{}
	}
	if loc := markerSuffix.FindStringIndex(rest); loc != nil {
		inner := parseKey(prefix, loginPrefix, key[:len(prefix)+1+loc[0]])
		if inner.kind == kindRate || inner.kind == kindQuotaLayer {
			inner.kind = kindMarker
			return inner
		}
		return parsedKey{}
	}
	open := strings.Index(rest, ":{")
	if open < 0 {
		return parsedKey{}
	}
	head, tail := rest[:open], rest[open+2:]
	end := strings.IndexByte(tail, '}')
	if end < 1 {
		return parsedKey{}
	}
	id, after := tail[:end], tail[end+1:]
	if head == "naive" && after == "" {
		return parsedKey{kind: kindDemo, owner: "naive", identity: id}
	}
	colon := strings.LastIndexByte(head, ':')
	if colon < 1 {
		return parsedKey{}
	}
	owner, alg := head[:colon], head[colon+1:]
	p := parsedKey{owner: owner, alg: alg, identity: id}
	switch alg {
	case "fw", "sl", "sw", "tb", "gc":
		if after == "" {
			p.kind = kindRate
		}
	case "qt":
		if strings.HasPrefix(after, ":") && !strings.Contains(after[1:], ":") {
			p.kind = kindQuotaLayer
		}
	case "q":
		parts := strings.Split(after, ":")
		if len(parts) == 3 && parts[0] == "" && parts[1] != "" && len(parts[2]) == 1 && strings.Contains("uhsk", parts[2]) {
			p.kind = kindBilling
		}
	case "cc":
		if after == "" {
			p.kind = kindLease
		}
	}
	if p.kind == kindUnknown {
		return parsedKey{}
	}
	return p
}

// owner is what the configuration says about one policy layer, quota or
// concurrency limit: its algorithm and how long its keys may live.
type owner struct {
	name  string
	alg   string
	limit int64 // default tier's limit (per shard), 0 when not applicable
	// maxTTL returns the longest TTL a key of the owner can have when
	// written at now.
	maxTTL func(now time.Time) time.Duration
	global bool // a layer shared by every request
}

// shortAlg is the tag floodgate.Key puts in keys for each algorithm.
var shortAlg = map[floodgate.Algorithm]string{
	floodgate.FixedWindow: "fw", floodgate.SlidingLog: "sl", floodgate.SlidingWindow: "sw",
	floodgate.TokenBucket: "tb", floodgate.GCRA: "gc", floodgate.Quota: "qt",
}

// Bounds on keys of the quota and concurrency packages and on markers.
const (
	quotaGrace      = time.Hour        // quota.Options.Grace default, what the service uses
	quotaMarkerLife = 24 * time.Hour   // quota's lost-state marker outlives the usage by this
	markerTTL       = 10 * time.Second // redisstore's release markers
	probeTTL        = 10 * time.Second // serve's breaker probe key
	fleetTTL        = 24 * time.Hour   // the longest heartbeat TTL package fleet accepts
	ttlSlack        = algo.TTLSlack
)

// layerTTL returns the longest TTL a state of p can have when written at
// now: the time it stays meaningful, as the step functions compute it,
// plus the slack; for a token bucket or GCRA as much again, at most the
// window (redisstore writes a bucket's TTL that long, so that the
// following writes keep it).
func layerTTL(p floodgate.Policy, now time.Time) time.Duration {
	var d time.Duration
	switch p.Algorithm {
	case floodgate.FixedWindow, floodgate.SlidingLog:
		d = p.Window
	case floodgate.SlidingWindow:
		d = 2 * p.Window
	case floodgate.TokenBucket, floodgate.GCRA:
		burst := p.Burst
		if burst == 0 {
			burst = p.Limit
		}
		d = time.Duration(float64(p.Window)*float64(burst)/float64(p.Limit)) + p.MaxDelay
		life := max(d, time.Millisecond) + ttlSlack
		return life + min(life, p.Window)
	case floodgate.Quota:
		_, end, _ := algo.QuotaPeriod(p, now.UnixMicro())
		d = time.UnixMicro(end).Sub(now) + algo.QuotaGrace
	}
	return d + ttlSlack
}

// owners lists what cfg defines, by key owner name and algorithm tag.
func owners(cfg *config.Config) map[string]*owner {
	out := map[string]*owner{}
	if cfg == nil {
		return out
	}
	tiers := cfg.Tiers()
	for _, p := range cfg.Policies() {
		for _, l := range p.Layers {
			l := l
			base := l.Policy("")
			name := p.Name + "." + l.Name
			out[name+"/"+shortAlg[base.Algorithm]] = &owner{
				name: name, alg: shortAlg[base.Algorithm], limit: l.Policy(cfg.DefaultTier()).Limit,
				global: len(l.Dimensions) == 0,
				maxTTL: func(now time.Time) time.Duration {
					d := layerTTL(base, now)
					for _, t := range tiers {
						d = max(d, layerTTL(l.Policy(t), now))
					}
					return d
				},
			}
		}
	}
	for _, q := range cfg.Quotas() {
		cal := q.Policy("").Calendar
		out[q.Name+"/q"] = &owner{name: q.Name, alg: "q", limit: q.Policy(cfg.DefaultTier()).Limit,
			maxTTL: func(now time.Time) time.Duration {
				return cal.PeriodAt(now).End.Sub(now) + quotaGrace + quotaMarkerLife + ttlSlack
			}}
	}
	for _, c := range cfg.ConcurrencyLimits() {
		ttl := c.LeaseTTL()
		out[c.Name+"/cc"] = &owner{name: c.Name, alg: "cc", limit: c.Policy(cfg.DefaultTier()).Limit,
			maxTTL: func(time.Time) time.Duration { return ttl + ttlSlack }}
	}
	return out
}

// addEnvoyOwners adds to out the policies of envoy's descriptors (serve
// --envoy-config): their keys are prefix:<derived policy name>:<alg>:{id}.
func addEnvoyOwners(out map[string]*owner, envoy *envoyrls.Config) {
	if envoy == nil {
		return
	}
	for _, rule := range envoy.Rules() {
		p := rule.Policy
		if p.Name == "" || p.Limit == 0 {
			continue // unlimited or denying: never stored
		}
		alg := shortAlg[p.Algorithm]
		out[p.Name+"/"+alg] = &owner{name: p.Name, alg: alg, limit: p.Limit,
			maxTTL: func(now time.Time) time.Duration { return layerTTL(p, now) }}
	}
}

// addOverrideOwners adds to out the owners of the keys of keys that limit
// overrides Envoy sent wrote: envoyrls decides an override under a
// fixed-window policy named after its domain and window
// (prefix:<domain>.override.<window>-<hash>:fw:{id}), so such a key
// belongs to a domain of envoy and lives at most the window (plus the
// slack). The limit is each request's own: the owner has none.
func addOverrideOwners(out map[string]*owner, envoy *envoyrls.Config, keys []scannedKey) {
	if envoy == nil {
		return
	}
	tried := map[string]bool{}
	for _, k := range keys {
		name := k.parsed.owner
		if k.parsed.alg != "fw" || tried[name] || out[name+"/fw"] != nil || !envoyDerivedName.MatchString(name) {
			continue
		}
		tried[name] = true
		_, window, ok := envoy.OverrideWindow(name)
		if !ok {
			continue
		}
		p := floodgate.Policy{Name: name, Algorithm: floodgate.FixedWindow, Limit: 1, Window: window}
		out[name+"/fw"] = &owner{name: name, alg: "fw",
			maxTTL: func(now time.Time) time.Duration { return layerTTL(p, now) }}
	}
}

// envoyDerivedName matches the policy names envoyrls derives for
// descriptors and limit overrides: a readable part, "-" and 12 hex digits.
var envoyDerivedName = regexp.MustCompile(`-[0-9a-f]{12}$`)

// isClusterProbe reports whether key is a Redis Cluster primary's probe
// key, prefix:probe:{N} with N decimal (fallback.RedisProbe).
func isClusterProbe(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix+":probe:{")
	if !ok {
		return false
	}
	n, ok := strings.CutSuffix(rest, "}")
	if !ok || n == "" || len(n) > 6 {
		return false
	}
	for _, r := range n {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
