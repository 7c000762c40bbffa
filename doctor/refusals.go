package doctor

import (
	"fmt"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

// redisRefusals are the Redis error replies, as an instance's /readyz
// quotes them, of a Redis that refuses the instance's commands whatever
// doctor reads there: its credentials (NOAUTH, WRONGPASS), its ACL user's
// permissions (NOPERM), its connections (maxclients), writes (READONLY on
// a replica, MISCONF after a failed snapshot, OOM under noeviction).
var redisRefusals = []string{"NOAUTH", "WRONGPASS", "NOPERM", "max number of clients", "READONLY", "MISCONF", "OOM command not allowed"}

// instancesRefused is what the instances' /readyz (already read) say of
// their Redis: the refusals among redisRefusals they name, lines naming
// each instance degraded by one or by an open circuit breaker, and
// whether any instance's breaker is open. An instance Redis refuses
// writes no heartbeat and no counter: the heartbeat set and the scan find
// nothing of it on a Redis doctor reads well.
type instancesRefused struct {
	kinds   []string // the refusals named, in redisRefusals' order
	lines   []string // "URL: /readyz degraded: ERROR"
	breaker bool     // some instance's circuit breaker is open
}

// redisRefusing reads the /readyz errors of the instances on Redis.
func redisRefusing(ins []*instance) instancesRefused {
	var out instancesRefused
	seen := map[string]bool{}
	for _, in := range ins {
		if in.notFloodgate != "" || in.readyStatus == 0 || in.store == "memory" || in.readyErr == "" {
			continue
		}
		named := false
		for _, k := range redisRefusals {
			if strings.Contains(in.readyErr, k) {
				named = true
				if !seen[k] {
					seen[k] = true
					out.kinds = append(out.kinds, k)
				}
			}
		}
		open := strings.Contains(in.readyErr, "circuit breaker ") && strings.Contains(in.readyErr, " open")
		out.breaker = out.breaker || open
		if named || open {
			out.lines = append(out.lines, fmt.Sprintf("%s: /readyz %s: %s", in.url, in.ready, in.readyErr))
		}
	}
	return out
}

// any reports whether some instance named a refusal or an open breaker.
func (f instancesRefused) any() bool { return len(f.lines) > 0 }

// cause says, as a clause, why the instances' heartbeats and keys are
// missing: Redis refuses them, naming the refusal, or their breakers are
// open.
func (f instancesRefused) cause() string {
	n := len(f.lines)
	if len(f.kinds) > 0 {
		return fmt.Sprintf("Redis refuses the instances' commands (%s from %s: %s, see Instances/ready), heartbeats included, which likely explains it",
			plural.Count(n, "instance's /readyz", "instances' /readyz"), plural.Word(n, "it names", "they name"), strings.Join(f.kinds, ", "))
	}
	return fmt.Sprintf("the circuit breaker of %s is open (/readyz, see Instances/ready): their commands to Redis fail, heartbeats included, which likely explains it",
		plural.Count(n, "instance", "instances"))
}

// fix is the fix of instances whose Redis refuses them.
func (f instancesRefused) fix() string {
	var parts []string
	for _, k := range f.kinds {
		switch k {
		case "NOAUTH", "WRONGPASS":
			parts = append(parts, "give the instances this Redis's user and password (serve --redis-password-file, --redis-username)")
		case "NOPERM":
			parts = append(parts, "grant the instances' ACL user what serve sends (docs/operations.md, Redis ACL users: EVALSHA among others)")
		case "max number of clients":
			parts = append(parts, "raise Redis's maxclients or find who holds its connections (CLIENT LIST; connected_clients in INFO clients, rejected_connections in INFO stats)")
		case "READONLY":
			parts = append(parts, "point the instances at the primary, not a replica")
		case "MISCONF":
			parts = append(parts, "fix Redis's failing snapshots (see its log) or stop-writes-on-bgsave-error")
		case "OOM command not allowed":
			parts = append(parts, "free memory or raise maxmemory (see Redis/memory)")
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "read each instance's error (see Instances/ready) and fix what makes its commands to Redis fail")
	}
	return strings.Join(parts, "; ") + "; then run doctor again: serve's heartbeats return within 2 s; if they do not, give doctor the Redis and the prefix the instances run with (serve --redis, --redis-sentinel or --redis-cluster, and --prefix)"
}
