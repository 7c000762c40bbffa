package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

// fullCoverageParam is the Redis Cluster setting that decides what one
// failed primary takes down: with yes, Redis's default, a node that sees
// a slot unserved (its primary marked failed, not yet replaced) sets
// cluster_state fail and answers CLUSTERDOWN for every slot; with no, only
// the unserved slots fail. docs/operations.md asks for no.
const fullCoverageParam = "cluster-require-full-coverage"

// coverage is what the full-coverage check read: each primary's
// cluster-require-full-coverage, "yes" or "no" ("" when it could not be
// read), by address, in the order read.
type coverage struct {
	read  bool     // the check ran
	addrs []string // the primaries asked, in order
	value map[string]string
}

// yes returns the primaries whose setting is yes.
func (cv coverage) yes() []string { return cv.with("yes") }

// unknown returns the primaries whose setting could not be read.
func (cv coverage) unknown() []string { return cv.with("") }

func (cv coverage) with(v string) []string {
	var out []string
	for _, a := range cv.addrs {
		if cv.value[a] == v {
			out = append(out, a)
		}
	}
	return out
}

// checkFullCoverage reads cluster-require-full-coverage on each primary
// (CONFIG GET) and warns where it is yes: there one failed primary, with
// or without a replica, takes every slot down until it is back or its
// replica is promoted, and every decision goes to the fallback. The
// cluster check and the latency probe's CLUSTERDOWN fix use what it read.
func (r *run) checkFullCoverage(ctx context.Context, c *Check) {
	c.Read = "CONFIG GET " + fullCoverageParam + " on each primary"
	r.coverage = coverage{read: true, value: map[string]string{}}
	nodes, err := r.primaries(ctx)
	if err != nil && len(nodes) == 0 {
		c.Status, c.Summary = Fail, "cannot list the primaries: "+err.Error()
		return
	}
	odd := false // a value other than yes or no, read without error
	for _, n := range nodes {
		r.coverage.addrs = append(r.coverage.addrs, n.addr)
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := n.client.ConfigGet(gctx, fullCoverageParam).Result()
		cancel()
		switch v := m[fullCoverageParam]; {
		case err != nil:
			// Refused (NOPERM, CONFIG renamed) or unanswered: the failed
			// read is judged as every check's is (judgeFailures).
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: %s unknown (CONFIG GET failed: %v)", n.addr, fullCoverageParam, err))
		case v == "yes" || v == "no":
			r.coverage.value[n.addr] = v
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: %s %s", n.addr, fullCoverageParam, v))
		default:
			odd = true
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: %s unknown (CONFIG GET answered %q)", n.addr, fullCoverageParam, v))
		}
	}
	yes, unknown := r.coverage.yes(), r.coverage.unknown()
	total := plural.Count(len(nodes), "primary", "primaries")
	switch {
	case len(yes) > 0:
		c.Status = Warn
		c.Summary = fmt.Sprintf("%s yes on %d of %s (%s): once any primary is marked failed (killed, paused, cut off), %s CLUSTERDOWN for all %s slots, not only the failed primary's, until it is back or its replica is promoted, and the fallback takes those decisions",
			fullCoverageParam, len(yes), total, strings.Join(firstN(yes, 5), ", "),
			plural.Word(len(yes), "this node answers", "these nodes answer"), plural.Word(len(yes), "its", "their"))
		c.Fix = "CONFIG SET " + fullCoverageParam + " no on every node, replicas too (each node applies its own setting, and a promoted replica keeps its), and set it in redis.conf so a restart keeps it: a failed primary then takes only its own slots down"
	case len(unknown) > 0:
		// A failed read adds its fix (judgeFailures: the reads to grant,
		// or Redis not answering).
		c.Status = Warn
		c.Summary = fmt.Sprintf("%s could not be read on %d of %s: with yes (Redis's default) one failed primary takes every slot down", fullCoverageParam, len(unknown), total)
		if len(unknown) < len(nodes) {
			c.Summary += "; the others have no"
		}
		if odd {
			c.Fix = "check the values above: " + fullCoverageParam + " is yes or no, and the documented setting is no on every node"
		}
	default:
		c.Status = Pass
		c.Summary = fmt.Sprintf("%s no on every primary: a failed primary takes only its own slots down, the others keep answering", fullCoverageParam)
	}
}

// noReplicaText is the cluster check's sentence about slot ranges without
// a replica, true for what the full-coverage check read.
func (r *run) noReplicaText() string {
	const base = "; some slot ranges have no replica, so a failed primary of theirs is not replaced and its slots stay down until it is back"
	yes, unknown := r.coverage.yes(), r.coverage.unknown()
	switch {
	case !r.coverage.read:
		return base
	case len(yes) > 0 && len(yes) == len(r.coverage.addrs):
		return base + ", and with " + fullCoverageParam + " yes (see full-coverage) it takes every slot down meanwhile, on every node"
	case len(yes) > 0:
		return fmt.Sprintf("%s, and the %d %s with %s yes (see full-coverage) then answer CLUSTERDOWN for every slot", base, len(yes),
			plural.Word(len(yes), "primary", "primaries"), fullCoverageParam)
	case len(unknown) > 0:
		return base + ", or every slot where " + fullCoverageParam + " is yes (Redis's default; it could not be read everywhere: see full-coverage)"
	}
	return base + " (" + fullCoverageParam + " no: the other slots keep answering)"
}

// clusterDownFix is the fix of a probe that met CLUSTERDOWN: what takes a
// Cluster down, with the full-coverage setting doctor read.
func (r *run) clusterDownFix() string {
	fix := "the cluster is down for the probe's slot: a primary failed or unreachable (killed, paused, cut off) without a replica to take over, a failover in progress (a primary marked failed, its replica not yet promoted), or slots served by no node"
	yes, unknown := r.coverage.yes(), r.coverage.unknown()
	setNo := true
	switch {
	case len(yes) > 0:
		fix += fmt.Sprintf("; %s is yes on %s (see full-coverage), so any one failed primary, even one with a replica, takes every slot down there until it is back or its replica is promoted", fullCoverageParam, strings.Join(firstN(yes, 5), ", "))
	case !r.coverage.read || len(unknown) > 0:
		fix += "; with " + fullCoverageParam + " yes (Redis's default; doctor could not read it everywhere), any one failed primary, even one with a replica, takes every slot down until it is back or its replica is promoted"
	default:
		setNo = false
	}
	fix += ": decisions on those slots fail too; see the cluster check, run redis-cli --cluster check HOST:PORT, bring a failed primary back or let its failover finish, and assign unserved slots (redis-cli --cluster fix HOST:PORT)"
	if setNo {
		fix += "; CONFIG SET " + fullCoverageParam + " no on every node (and in redis.conf) keeps the other slots answering"
	}
	return fix
}
