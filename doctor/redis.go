package doctor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/plural"
)

// minVersion is the oldest Redis the scripts run on: they write states
// with SET ... KEEPTTL, which Redis 6.0 introduced.
var minVersion = [3]int{6, 0, 0}

// node is one primary doctor reads.
type node struct {
	addr   string
	client *redis.Client
}

// primaries returns the primaries: every Cluster primary that serves
// slots, or the one server (the current primary behind Sentinel).
func (r *run) primaries(ctx context.Context) ([]node, error) {
	if r.cluster == nil {
		c, ok := r.client.(*redis.Client)
		if !ok {
			return nil, fmt.Errorf("unsupported client %T", r.client)
		}
		addr := c.Options().Addr
		if _, ok := r.sentinels(); ok {
			addr = "primary of " + r.opts.Redis.String()
		}
		return []node{{addr: addr, client: c}}, nil
	}
	var mu sync.Mutex
	var out []node
	err := r.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		out = append(out, node{addr: c.Options().Addr, client: c})
		mu.Unlock()
		return nil
	})
	sortNodes(out)
	return out, err
}

func sortNodes(ns []node) {
	for i := 1; i < len(ns); i++ {
		for j := i; j > 0 && ns[j].addr < ns[j-1].addr; j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
		}
	}
}

// parseInfo parses an INFO reply into field → value.
func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func versionLess(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// quotasConfigured reports whether the configuration counts billing
// usage (quota layers or quotas), whose loss a restart would not repair.
func (r *run) quotasConfigured() (bool, string) {
	if r.cfg == nil {
		return false, ""
	}
	var names []string
	for _, p := range r.cfg.Policies() {
		for _, l := range p.Layers {
			if l.Policy("").Algorithm.String() == "quota" {
				names = append(names, p.Name+"."+l.Name)
			}
		}
	}
	for _, q := range r.cfg.Quotas() {
		names = append(names, q.Name)
	}
	return len(names) > 0, strings.Join(firstN(names, maxListed), ", ")
}

// tierAssignments reports whether the configuration tiers any limit by an
// identity (tier_dimension), and how many tier assignments the hash
// holds: -1 when it was not read (Redis unreachable) or the read failed.
func (r *run) tierAssignments(ctx context.Context) (tiered bool, assigned int64, key string) {
	keys, _ := config.KeysFor(r.opts.Prefix)
	key, assigned = keys.Tiers, -1
	if r.cfg != nil {
		for _, p := range r.cfg.Policies() {
			tiered = tiered || p.Tiered()
		}
		for _, q := range r.cfg.Quotas() {
			tiered = tiered || q.Tiered()
		}
		for _, l := range r.cfg.ConcurrencyLimits() {
			tiered = tiered || l.Tiered()
		}
	}
	if r.down != nil || r.client == nil {
		return tiered, -1, key
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := r.client.HLen(hctx, key).Result(); err == nil {
		assigned = n
	}
	return tiered, assigned, key
}

// redisChecks runs the Redis group; with Redis unreachable, it reports
// its checks skipped.
func (r *run) redisChecks(ctx context.Context) {
	if r.down != nil {
		names := []string{"server", "maxmemory-policy", "memory", "persistence", "replication"}
		if r.cluster != nil {
			names = append(names, "full-coverage", "cluster")
		}
		if st, ok := r.sentinels(); ok && len(st.Addrs) > 0 {
			if r.primaryNamed {
				// The sentinels answer, the primary they name does
				// not: whether they can replace it is theirs to
				// tell (an outside walk: "a failover may be under
				// way" with quorums no failover could reach).
				r.check(GroupRedis, "sentinel", func(c *Check) { r.checkSentinel(ctx, c) })
				r.primaryDownVerdict()
			} else {
				names = append(names, "sentinel")
			}
		}
		names = append(names, "latency")
		r.skipped(GroupRedis, "skipped", "not run: "+strings.Join(names, ", "))
		return
	}
	var nodes []node
	var nodesErr error
	r.check(GroupRedis, "server", func(c *Check) {
		c.Read = "INFO (default sections) on each primary"
		nodes, nodesErr = r.primaries(ctx)
		if nodesErr != nil && len(nodes) == 0 {
			c.Status, c.Summary = Fail, "cannot list the primaries: "+nodesErr.Error()
			c.Fix = "check that every Redis node is reachable from this host"
			return
		}
		var versions []string
		worst := Pass
		replicas, old, clusterNodes := 0, 0, 0
		var infoErr error // the worst INFO failure
		r.nodeCount = len(nodes)
		for _, n := range nodes {
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			s, err := n.client.Info(ictx).Result()
			cancel()
			if err != nil {
				worst = Fail
				if infoErr == nil || classify(ctx, err) > classify(ctx, infoErr) {
					infoErr = err
				}
				line := fmt.Sprintf("%s: INFO failed: %v", n.addr, err)
				if h := r.tlsHint(err); h != "" {
					line += " (" + h + ")"
				}
				c.Evidence = append(c.Evidence, line)
				r.unreadAddrs = append(r.unreadAddrs, n.addr)
				continue
			}
			info := parseInfo(s)
			r.info[n.addr] = info
			r.primaryAddrs = append(r.primaryAddrs, n.addr)
			name, ver := "redis", info["redis_version"]
			if v := info["valkey_version"]; v != "" {
				name, ver = "valkey", v
			}
			line := fmt.Sprintf("%s %s %s (%s)", n.addr, name, ver, info["redis_mode"])
			if role := info["role"]; role != "" && role != "master" {
				// Reached a replica where a primary was expected (a
				// replica's URL given): say so here, not only in the
				// replication check.
				replicas++
				line += ", role " + replicaRole(role)
			}
			if r.cluster == nil && info["redis_mode"] == "cluster" {
				// A Cluster node given as a single Redis: it answers
				// INFO, but every key of a slot it does not serve gets
				// MOVED, so serve's decisions fail on it.
				clusterNodes++
			}
			versions = append(versions, line)
			v, ok := parseVersion(info["redis_version"])
			switch {
			case !ok:
				worst = max(worst, Warn)
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: cannot read the version %q", n.addr, info["redis_version"]))
			case versionLess(v, minVersion):
				worst, old = Fail, old+1
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: %s is older than 6.0: the scripts' SET ... KEEPTTL fails there", n.addr, info["redis_version"]))
			}
		}
		c.Evidence = append(versions, c.Evidence...)
		if clusterNodes > 0 {
			worst = Fail
		}
		c.Status = worst
		switch worst {
		case Pass:
			c.Summary = serversCount(len(nodes), replicas) + plural.Word(len(nodes), ", at", ", all at") + " Redis 6.0 or later (scripts need EVALSHA and SET KEEPTTL)"
		case Warn:
			c.Summary = "could not read every version"
		default:
			var parts, fixes []string
			if clusterNodes > 0 {
				parts = append(parts, "the address is a Redis Cluster node (redis_mode cluster) given as a single Redis: it answers MOVED for the keys of every slot it does not serve, so most decisions would fail")
				fixes = append(fixes, "give the Cluster's nodes with --redis-cluster host:port,... (or a redis-cluster:// URL), to doctor and to serve alike")
			}
			if old > 0 {
				parts = append(parts, plural.Count(old, "primary is", "primaries are")+" older than Redis 6.0 and cannot run Floodgate's scripts")
				fixes = append(fixes, "upgrade to Redis 6.0 or later (tested with 7.0) or Valkey")
			}
			if infoErr != nil {
				parts = append(parts, fmt.Sprintf("INFO could not be read on %d of %s (%v)", len(nodes)-len(r.primaryAddrs),
					plural.Count(len(nodes), "primary", "primaries"), infoErr))
				switch classify(ctx, infoErr) {
				case errUnreachable:
					if connRefused(infoErr) {
						// Up, at its maxclients limit: not "stopped
						// answering".
						fixes = append(fixes, maxclientsFix)
						break
					}
					f := unreachableFixOf(infoErr)
					if h := r.tlsHint(infoErr); h != "" {
						f += "; " + h
					}
					fixes = append(fixes, f)
				case errNoPerm:
					fixes = append(fixes, permissionFix())
				case errDeadline:
					fixes = append(fixes, deadlineFix)
				default:
					fixes = append(fixes, "read the INFO error above (a proxy or managed service that does not serve INFO cannot be audited)")
				}
			}
			c.Summary = strings.Join(parts, "; ")
			c.Fix = strings.Join(fixes, "; ")
		}
	})
	r.check(GroupRedis, "maxmemory-policy", r.checkEviction)
	r.check(GroupRedis, "memory", r.checkMemory)
	r.check(GroupRedis, "persistence", func(c *Check) { r.checkPersistence(ctx, c) })
	r.check(GroupRedis, "replication", func(c *Check) { r.checkReplication(ctx, c) })
	if r.cluster != nil {
		// Before the cluster check, whose sentence on primaries without
		// a replica depends on the setting.
		r.check(GroupRedis, "full-coverage", func(c *Check) { r.checkFullCoverage(ctx, c) })
		r.check(GroupRedis, "cluster", func(c *Check) { r.checkCluster(ctx, c) })
	}
	if st, ok := r.sentinels(); ok && len(st.Addrs) > 0 {
		r.check(GroupRedis, "sentinel", func(c *Check) { r.checkSentinel(ctx, c) })
	}
	r.check(GroupRedis, "latency", func(c *Check) { r.checkLatency(ctx, c, nodes) })
}

// partialPrimaries makes a check judged on the INFO of some primaries
// only (the server check could not read the others) say how many it read,
// and warn rather than pass on them.
func (r *run) partialPrimaries(c *Check) {
	read := len(r.primaryAddrs)
	if read == 0 || read >= r.nodeCount {
		return
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("%d of %s read: the server check says why the others could not be", read, plural.Count(r.nodeCount, "primary", "primaries")))
	if c.Status <= Pass {
		c.Status = Warn
		c.Summary = fmt.Sprintf("only %d of %s read: %s", read, plural.Count(r.nodeCount, "primary", "primaries"), c.Summary)
		c.Fix = "make every primary reachable (the server check says why its INFO failed) and run doctor again: the primaries not read were not checked"
	}
}

// replicaRole names INFO's role field for people ("slave" is a replica).
func replicaRole(role string) string {
	if role == "slave" {
		return "replica"
	}
	return role
}

// serversCount says how many servers the server check read, and how many
// of them are replicas rather than primaries (a replica's address given
// where Floodgate needs the primary; the replication check fails it).
func serversCount(n, replicas int) string {
	switch {
	case replicas == 0:
		return plural.Count(n, "primary", "primaries")
	case replicas == n && n == 1:
		return "1 replica, not a primary (see replication)"
	case replicas == n:
		return plural.Count(n, "server", "servers") + ", all replicas, no primary (see replication)"
	}
	return fmt.Sprintf("%d servers, %d of them %s (see replication)", n, replicas, plural.Word(replicas, "a replica, not a primary", "replicas, not primaries"))
}

// policyMeaning says what an eviction policy does to Floodgate's keys.
// Counters, quota records, lockouts, concurrency leases and heartbeats
// have a TTL; the configuration document and the tier hash have none, so
// only allkeys-* evicts them.
func policyMeaning(policy string) (Status, string) {
	const lost = "an identity whose counter is evicted starts over with a fresh limit (over-admission), quota usage is forgotten (billing under-counts), login lockouts lift early, evicted concurrency leases are granted again (more in flight than the limit)"
	switch policy {
	case "noeviction":
		return Pass, "noeviction: at maxmemory Redis refuses writes, decisions fail and the fallback decides; no live counter is ever dropped"
	case "allkeys-lru", "allkeys-lfu", "allkeys-random":
		return Fail, policy + ": at maxmemory Redis evicts any key: " + lost + "; the configuration document and the tier hash go too (an instance started with --config-from-redis then has no configuration and answers 503, tiered identities fall to the default tier)"
	case "volatile-lru", "volatile-lfu", "volatile-random":
		return Fail, policy + ": at maxmemory Redis evicts keys with a TTL, which every counter, quota record, lockout and lease has (only the configuration document and the tier hash have none): " + lost
	case "volatile-ttl":
		return Fail, "volatile-ttl: evicts the keys closest to expiry first (windows about to end, leases), then longer ones, finally monthly quotas: limits reset early, usage can be lost, leases are granted again past the limit"
	}
	return Warn, fmt.Sprintf("unknown policy %q", policy)
}

func (r *run) checkEviction(c *Check) {
	defer r.partialPrimaries(c)
	c.Read = "INFO memory (from the server check, no extra command)"
	if len(r.primaryAddrs) == 0 {
		c.Status, c.Summary = Warn, "no primary could be read"
		return
	}
	worst := Pass
	var meaning string
	for _, addr := range r.primaryAddrs {
		info := r.info[addr]
		policy, maxmem := info["maxmemory_policy"], info["maxmemory"]
		st, m := policyMeaning(policy)
		if maxmem == "0" && st == Fail {
			// Without maxmemory nothing is evicted yet; the policy is a trap
			// for whoever sets maxmemory later.
			st = Warn
			m += " (maxmemory is 0, so nothing is evicted until a limit is set)"
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s: maxmemory %s, maxmemory-policy %s", addr, humanBytes(maxmem), policy))
		if st >= worst {
			worst, meaning = st, m
		}
	}
	c.Status, c.Summary = worst, meaning
	if worst != Pass {
		c.Fix = "CONFIG SET maxmemory-policy noeviction (and in redis.conf): with it Redis refuses writes when full and Floodgate's fallback decides, instead of silently resetting limits and losing quota usage"
	}
}

func humanBytes(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s
	}
	if n == 0 {
		return "0 (no limit)"
	}
	return formatBytes(n)
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// refusingWrites returns a line for each primary read that refuses writes
// now: maxmemory-policy noeviction with used memory at or over maxmemory
// (INFO from the server check). Every write there fails OOM, serve's
// heartbeats and counters alike; nil when none does.
func (r *run) refusingWrites() []string {
	var out []string
	for _, addr := range r.primaryAddrs {
		info := r.info[addr]
		used, _ := strconv.ParseInt(info["used_memory"], 10, 64)
		maxmem, _ := strconv.ParseInt(info["maxmemory"], 10, 64)
		if info["maxmemory_policy"] == "noeviction" && maxmem > 0 && used >= maxmem {
			out = append(out, fmt.Sprintf("%s: used %s of maxmemory %s under noeviction: it refuses every write (OOM)", addr, formatBytes(used), formatBytes(maxmem)))
		}
	}
	return out
}

func (r *run) checkMemory(c *Check) {
	defer r.partialPrimaries(c)
	c.Read = "INFO memory (from the server check, no extra command)"
	if len(r.primaryAddrs) == 0 {
		c.Status, c.Summary = Warn, "no primary could be read"
		return
	}
	worst := Pass
	unlimited, full := 0, 0
	for _, addr := range r.primaryAddrs {
		info := r.info[addr]
		used, _ := strconv.ParseInt(info["used_memory"], 10, 64)
		maxmem, _ := strconv.ParseInt(info["maxmemory"], 10, 64)
		if maxmem == 0 {
			unlimited++
			sys, _ := strconv.ParseInt(info["total_system_memory"], 10, 64)
			line := fmt.Sprintf("%s: used %s, no maxmemory", addr, formatBytes(used))
			if sys > 0 {
				line += fmt.Sprintf(" (host memory %s, %.1f%% used by Redis)", formatBytes(sys), 100*float64(used)/float64(sys))
			}
			c.Evidence = append(c.Evidence, line)
			continue
		}
		frac := float64(used) / float64(maxmem)
		if frac >= 1 {
			full++
		}
		st := Pass
		switch {
		case frac >= 0.9:
			st = Fail
		case frac >= 0.75:
			st = Warn
		}
		worst = max(worst, st)
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s: used %s of maxmemory %s (%.1f%%)", addr, formatBytes(used), formatBytes(maxmem), 100*frac))
	}
	switch {
	case full > 0:
		c.Summary = plural.Count(full, "primary is", "primaries are") + " at or over maxmemory: writes are being refused now (noeviction: decisions fail and the fallback decides) or counters evicted"
		c.Fix = "raise maxmemory now, add Cluster shards, or shorten windows/TTLs; see the Keys group for what uses the memory"
	case worst == Fail:
		c.Summary = "a primary is at 90% or more of maxmemory: writes will soon be refused (noeviction) or counters evicted"
		c.Fix = "raise maxmemory, add Cluster shards, or shorten windows/TTLs; see the Keys group for what uses the memory"
	case worst == Warn:
		c.Summary = "a primary is above 75% of maxmemory"
		c.Fix = "plan more memory before traffic grows; see the Keys group for what uses it"
	case unlimited > 0:
		worst = Warn
		c.Summary = plural.Count(unlimited, "primary", "primaries") + " without maxmemory: Redis grows until the host kills it"
		c.Fix = "set maxmemory (below the host's memory, leaving room for fork and buffers) with maxmemory-policy noeviction"
	default:
		c.Summary = "every primary has headroom under maxmemory"
	}
	c.Status = worst
}

func (r *run) checkPersistence(ctx context.Context, c *Check) {
	defer r.partialPrimaries(c)
	c.Read = "INFO persistence (from the server check), CONFIG GET save on each primary and CONFIG GET appendfsync on each with AOF"
	quotas, names := r.quotasConfigured()
	tiered, assigned, tiersKey := r.tierAssignments(ctx)
	if assigned >= 0 {
		c.Read += ", HLEN " + tiersKey
	}
	if len(r.primaryAddrs) == 0 {
		c.Status, c.Summary = Warn, "no primary could be read"
		return
	}
	nodes := map[string]*redis.Client{}
	if ns, err := r.primaries(ctx); err == nil {
		for _, n := range ns {
			nodes[n.addr] = n.client
		}
	}
	aofOff, fsyncNo, broken := 0, 0, 0
	for _, addr := range r.primaryAddrs {
		info := r.info[addr]
		aof := info["aof_enabled"] == "1"
		save, fsync := "unknown (no client for this primary)", ""
		if cl := nodes[addr]; cl != nil {
			save = configValue(ctx, cl, "save")
			if aof {
				fsync = configValue(ctx, cl, "appendfsync")
			}
		}
		if !aof {
			aofOff++
		}
		if fsync == `"no"` {
			fsyncNo++
		}
		line := fmt.Sprintf("%s: appendonly %s, save %s, last bgsave %s", addr, onOff(aof), save, info["rdb_last_bgsave_status"])
		if fsync != "" {
			line = fmt.Sprintf("%s: appendonly yes, appendfsync %s, save %s, last bgsave %s", addr, fsync, save, info["rdb_last_bgsave_status"])
		}
		if aof {
			line += ", last AOF write " + info["aof_last_write_status"]
		}
		if info["rdb_last_bgsave_status"] == "err" || info["aof_last_write_status"] == "err" {
			broken++
		}
		c.Evidence = append(c.Evidence, line)
	}
	if quotas {
		c.Evidence = append(c.Evidence, "quotas configured: "+names)
	}
	if assigned >= 0 {
		c.Evidence = append(c.Evidence, tiersKey+" holds "+plural.Count(assigned, "tier assignment", "tier assignments"))
	}
	// Tier assignments are written once and read for good: a Redis that
	// comes back empty drops them all, and every assigned identity falls
	// to the default tier without an error anywhere.
	tiersLost := plural.Count(aofOff, "primary runs", "primaries run") + " without AOF: a restart or failover loses the assignments made since the last snapshot (every one without snapshots), and their identities fall to the default tier with no error or log line"
	switch {
	case quotas && aofOff > 0:
		c.Status = Fail
		c.Summary = "quotas are configured but " + plural.Count(aofOff, "primary runs", "primaries run") + " without AOF: a restart or failover loses acknowledged usage since the last snapshot, and customers get it again"
		if assigned > 0 {
			c.Summary += "; the " + plural.Count(assigned, "tier assignment", "tier assignments") + " in " + tiersKey + " would be lost with it"
		}
		c.Fix = "CONFIG SET appendonly yes and appendfsync everysec (and in redis.conf) on every primary holding quotas; replicas do not replace it: a primary without persistence that restarts before a replica takes over (within cluster-node-timeout, or before Sentinel's down-after-milliseconds) comes back empty, and its replicas resync from it and are emptied too"
	case assigned > 0 && aofOff > 0:
		c.Status = Fail
		c.Summary = plural.Count(assigned, "tier assignment is", "tier assignments are") + " stored in " + tiersKey + " but " + tiersLost
		c.Fix = "CONFIG SET appendonly yes and appendfsync everysec (and in redis.conf) on every primary; keep the assignments' source of truth elsewhere too (billing) to assign them again with POST /admin/v1/tier"
	case broken > 0:
		c.Status = Warn
		c.Summary = "the last RDB save or AOF write failed on a primary"
		c.Fix = "read the Redis log: a full disk or a fork failure stops persistence"
	case (quotas || assigned > 0) && fsyncNo > 0:
		// appendfsync no leaves the flush to the kernel, which writes
		// dirty pages back after about 30 s (Linux's
		// dirty_expire_centisecs): a restart of Redis alone loses
		// nothing, a crash of its host up to that much.
		c.Status = Warn
		what := "acknowledged quota usage"
		if !quotas {
			what = "the tier assignments in " + tiersKey
		}
		c.Summary = "AOF is on, but " + plural.Count(fsyncNo, "primary runs", "primaries run") + " it with appendfsync no: Redis never fsyncs it, the kernel writes it out about every 30 s, so a crash of the host loses up to ~30 s of " + what
		c.Fix = "CONFIG SET appendfsync everysec (and in redis.conf) on every primary holding quotas or tier assignments: a crash then loses at most about a second (always: nothing, at a cost in latency)"
	case r.cfg == nil && aofOff > 0:
		// Without the configuration (none in Redis, no --config) nothing
		// says whether the instances count quotas: the built-in example
		// they run without --config does.
		c.Status = Warn
		c.Summary = "the configuration is unknown (see config validates), and " + plural.Count(aofOff, "primary runs", "primaries run") + " without AOF: if the instances count quotas (the built-in example does), a restart or failover loses acknowledged usage"
		c.Fix = "give doctor the instances' configuration (--config FILE, or push it with floodgate config push); with quotas, CONFIG SET appendonly yes on every primary"
	case tiered && aofOff > 0:
		c.Status = Warn
		c.Summary = "limits are tiered (tier_dimension) and " + plural.Count(aofOff, "primary runs", "primaries run") + " without AOF: no tier assignment is stored yet, but once some are, a restart or failover loses the assignments made since the last snapshot (every one without snapshots), and their identities fall to the default tier with no error or log line"
		c.Fix = "CONFIG SET appendonly yes and appendfsync everysec (and in redis.conf) on every primary before assigning tiers"
	case !quotas:
		c.Status = Pass
		c.Summary = "no quotas configured: rate-limit counters are short-lived, losing them admits at most one window more"
		if aofOff == 0 && (tiered || assigned > 0) {
			c.Summary = "no quotas configured, and AOF is on where the tier assignments are kept"
		}
	default:
		c.Status = Pass
		c.Summary = "AOF is on wherever quotas are counted"
	}
}

// configValue returns CONFIG GET name's value on cl, quoted, or
// "unknown (...)" with the error.
func configValue(ctx context.Context, cl *redis.Client, name string) string {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := cl.ConfigGet(gctx, name).Result()
	if err != nil {
		return fmt.Sprintf("unknown (CONFIG GET failed: %v)", err)
	}
	return fmt.Sprintf("%q", m[name])
}

func onOff(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (r *run) checkReplication(_ context.Context, c *Check) {
	defer r.partialPrimaries(c)
	c.Read = "INFO replication (from the server check, no extra command)"
	if len(r.primaryAddrs) == 0 {
		c.Status, c.Summary = Warn, "no primary could be read"
		return
	}
	worst, without := Pass, 0
	for _, addr := range r.primaryAddrs {
		info := r.info[addr]
		if info["role"] != "master" {
			worst = Fail
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: role %s, link %s: Floodgate writes, it must talk to a primary", addr, info["role"], info["master_link_status"]))
			continue
		}
		n, _ := strconv.Atoi(info["connected_slaves"])
		if n == 0 {
			without++
		}
		line := addr + ": primary with " + plural.Count(n, "replica", "replicas")
		for i := 0; i < n; i++ {
			s := info[fmt.Sprintf("slave%d", i)]
			line += "; " + s
			f := parseFields(s)
			if f["state"] != "online" {
				worst = max(worst, Warn)
			}
			if lag, err := strconv.Atoi(f["lag"]); err == nil && lag > 10 {
				worst = max(worst, Warn)
			}
		}
		c.Evidence = append(c.Evidence, line)
	}
	c.Status = worst
	switch {
	case worst == Fail:
		c.Summary = "doctor reached a replica, not the primary"
		c.Fix = "point Floodgate (and doctor) at the primary, or use Sentinel or Cluster addresses so clients follow failovers"
	case worst == Warn:
		c.Summary = "a replica is not online or lags more than 10s"
		c.Fix = "check the replica's log and the network; a failover to a lagging replica loses the counters it missed"
	case without > 0:
		c.Status = Info
		c.Summary = plural.Count(without, "primary", "primaries") + " without replicas: a failed primary loses its counters, and the fallback decides until it is back"
		if len(r.unreadAddrs) > 0 {
			c.Summary += "; not read: " + strings.Join(r.unreadAddrs, ", ") + ", whose replicas are unknown"
		}
	case len(r.unreadAddrs) > 0:
		// Not "every primary": the one not read may have none left (a
		// walk froze a primary and its only replica).
		c.Summary = "every primary read has online replicas; not read: " + strings.Join(r.unreadAddrs, ", ") + ", whose replicas are unknown"
	default:
		c.Summary = "every primary has online replicas"
	}
}

// parseFields parses "ip=1.2.3.4,port=6380,state=online,offset=1,lag=0".
func parseFields(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
