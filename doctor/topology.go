package doctor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/clusterslots"
	"github.com/floodgate-rl/floodgate/internal/connsetup"
	"github.com/floodgate-rl/floodgate/internal/plural"
	"github.com/floodgate-rl/floodgate/internal/redisnil"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// slotRange is an inclusive range of hash slots.
type slotRange struct{ start, end int }

func (s slotRange) String() string {
	if s.start == s.end {
		return fmt.Sprint(s.start)
	}
	return fmt.Sprintf("%d-%d", s.start, s.end)
}

// missingSlots returns the slot ranges no range of covered serves.
func missingSlots(covered []slotRange) []slotRange {
	var have [clusterSlots]bool
	for _, r := range covered {
		for s := max(r.start, 0); s <= min(r.end, clusterSlots-1); s++ {
			have[s] = true
		}
	}
	var out []slotRange
	for s := 0; s < clusterSlots; s++ {
		if have[s] {
			continue
		}
		e := s
		for e+1 < clusterSlots && !have[e+1] {
			e++
		}
		out = append(out, slotRange{s, e})
		s = e
	}
	return out
}

func joinRanges(rs []slotRange, most int) string {
	var parts []string
	for i, r := range rs {
		if i == most {
			parts = append(parts, fmt.Sprintf("… %d more", len(rs)-most))
			break
		}
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ", ")
}

// checkCluster reads every primary's own view of the cluster: its state,
// which slots it sees served, and its slots being migrated or imported
// (a resharding in progress, or one that stopped half-way).
func (r *run) checkCluster(ctx context.Context, c *Check) {
	c.Read = "CLUSTER INFO, CLUSTER SLOTS and CLUSTER NODES on each primary"
	nodes, err := r.primaries(ctx)
	if err != nil && len(nodes) == 0 {
		c.Status, c.Summary = Fail, "cannot list the primaries: "+err.Error()
		return
	}
	worst := Pass
	var worstMissing []slotRange
	var open []string // per primary, its slots in MIGRATING or IMPORTING state
	noReplica := 0
	var unread, down []string // primaries doctor could not read; those reporting cluster_state other than ok
	var atMax []string        // the unread that closed doctor's new connection during its setup (maxclients)
	var out clusterOutage     // the most unreachable nodes one primary's CLUSTER NODES lists
	var outFrom string        // that primary
	for _, n := range nodes {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := n.client.ClusterInfo(cctx).Result()
		if err != nil {
			cancel()
			worst = Fail
			unread = append(unread, n.addr)
			if connRefused(err) {
				atMax = append(atMax, n.addr)
			}
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: CLUSTER INFO failed: %v", n.addr, err))
			continue
		}
		// Unguarded: serve's client refuses a node's map smaller than
		// the others' (see clusterslots); doctor reports each as it is.
		//lint:ignore SA1019 CLUSTER SLOTS is deprecated but served by every Redis since 3.0; CLUSTER SHARDS needs 7.0.
		slots, err := n.client.ClusterSlots(clusterslots.Unguarded(cctx)).Result()
		nodesOut, nodesErr := n.client.ClusterNodes(cctx).Result()
		cancel()
		ci := parseInfo(info)
		line := fmt.Sprintf("%s: cluster_state %s, slots assigned %s, ok %s, pfail %s, fail %s, known nodes %s",
			n.addr, ci["cluster_state"], ci["cluster_slots_assigned"], ci["cluster_slots_ok"],
			ci["cluster_slots_pfail"], ci["cluster_slots_fail"], ci["cluster_known_nodes"])
		if ci["cluster_state"] != "ok" {
			worst = Fail
			down = append(down, n.addr)
		}
		if ci["cluster_slots_pfail"] != "0" || ci["cluster_slots_fail"] != "0" {
			worst = max(worst, Warn)
		}
		if err != nil {
			worst = Fail
			line += fmt.Sprintf("; CLUSTER SLOTS failed: %v", err)
		} else {
			var ranges []slotRange
			for _, s := range slots {
				if len(s.Nodes) == 0 {
					continue
				}
				ranges = append(ranges, slotRange{int(s.Start), int(s.End)})
				if len(s.Nodes) < 2 {
					noReplica++
				}
			}
			if miss := missingSlots(ranges); len(miss) > 0 {
				worst = Fail
				line += "; slots served by no node: " + joinRanges(miss, 5)
				if len(miss) > len(worstMissing) || worstMissing == nil {
					worstMissing = miss
				}
			}
		}
		if nodesErr == nil {
			if o := outage(parseClusterNodes(nodesOut)); len(o.unreachable) > len(out.unreachable) || len(o.orphans) > len(out.orphans) {
				out, outFrom = o, n.addr
			}
			if mig := openSlots(nodesOut); len(mig) > 0 {
				worst = max(worst, Warn)
				open = append(open, n.addr+": "+strings.Join(mig, ", "))
				line += "; open slots: " + strings.Join(mig, ", ")
			}
		} else {
			line += fmt.Sprintf("; CLUSTER NODES failed: %v", nodesErr)
		}
		c.Evidence = append(c.Evidence, line)
	}
	if len(out.unreachable) > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("nodes %s's CLUSTER NODES flags unreachable: %s", outFrom, strings.Join(out.unreachable, ", ")))
	}
	c.Status = worst
	fullCoverage := "every slot answers CLUSTERDOWN while cluster_state is fail (cluster-require-full-coverage yes, see full-coverage)"
	switch {
	case worstMissing != nil:
		c.Summary = fmt.Sprintf("%s by no primary (%s): every decision whose keys hash there fails (rate limits are then taken by the fallback; quotas and leases answer 503 store-unavailable)", plural.Count(slotCount(worstMissing), "hash slot is served", "hash slots are served"), joinRanges(worstMissing, 5))
		c.Fix = "assign the slots again (redis-cli --cluster fix HOST:PORT, or CLUSTER ADDSLOTSRANGE on the node that should own them) and check that cluster_state is ok on every node"
	case len(out.orphans) > 0:
		c.Status = Fail
		c.Summary = fmt.Sprintf("%s no reachable owner: %s; every decision whose keys hash there fails",
			plural.Count(slotCount(out.orphanSlots), "hash slot has", "hash slots have"), strings.Join(out.orphans, "; "))
		if len(down) > 0 {
			c.Summary = fmt.Sprintf("the cluster is down (cluster_state fail on %s): ", strings.Join(down, ", ")) + c.Summary + ", and " + fullCoverage
		} else {
			c.Summary += "; the primaries read report cluster_state ok and serve the other slots"
		}
		c.Fix = fmt.Sprintf("bring back the unreachable nodes named (a stopped or frozen process, its host, the network: check them from here); if the primary cannot come back, bring back a replica of it (a replica that is up takes over after cluster-node-timeout, or CLUSTER FAILOVER TAKEOVER on it), or, with none left, assign slots %s to another primary (redis-cli --cluster fix HOST:PORT; the counters of those slots are lost)", joinRanges(out.orphanSlots, 5))
		if len(down) > 0 {
			c.Fix += "; so that one primary's loss no longer takes every slot down, CONFIG SET cluster-require-full-coverage no on every node (see full-coverage)"
		}
	case len(down) > 0:
		c.Summary = fmt.Sprintf("the cluster is down: cluster_state fail on %s", strings.Join(down, ", "))
		c.Fix = "run redis-cli --cluster check HOST:PORT and fix what it reports"
		if len(out.unreachable) > 0 {
			c.Summary += "; unreachable: " + strings.Join(out.unreachable, ", ")
		}
		if len(out.failover) > 0 {
			c.Summary += "; a replica can take over from " + strings.Join(out.failover, ", ")
			c.Fix = "bring back the unreachable nodes named, or let the failover finish (a replica takes over after cluster-node-timeout; CLUSTER FAILOVER FORCE on the replica if it does not), then run doctor again"
		}
	case len(unread) > 0:
		c.Summary = fmt.Sprintf("%s could not be read (%s); the cluster itself reports ok on the others",
			plural.Count(len(unread), "primary", "primaries"), strings.Join(unread, ", "))
		if len(out.unreachable) > 0 {
			c.Summary += "; unreachable: " + strings.Join(out.unreachable, ", ")
		}
		c.Fix = "check that " + strings.Join(unread, ", ") + " is up and answers from this host (its process, its host, the network, a firewall), then run doctor again"
		if len(atMax) == len(unread) {
			// Up, and refusing new connections: not a node to look for.
			c.Summary += fmt.Sprintf("; %s new connections (maxclients)", plural.Word(len(atMax), "it refuses", "they refuse"))
			c.Fix = strings.Join(atMax, ", ") + ": " + maxclientsFix
		}
	case worst == Fail:
		c.Summary = "a primary reports the cluster down or could not be read"
		c.Fix = "run redis-cli --cluster check HOST:PORT and fix what it reports"
	case worst == Warn && len(open) > 0:
		c.Summary = "slots are being moved between primaries (MIGRATING/IMPORTING): " + strings.Join(open, "; ") +
			". While a slot is open, a decision whose keys are split between the two nodes fails with TRYAGAIN (a rate limit is then taken by the fallback; quotas and leases have none and answer 503 store-unavailable)"
		c.Fix = "if no resharding is running, the last one stopped half-way: finish or undo it with redis-cli --cluster fix HOST:PORT (redis-cli --cluster check HOST:PORT lists open slots)"
	case worst == Warn:
		c.Summary = "some slots are in PFAIL or FAIL state"
		if len(out.unreachable) > 0 {
			c.Summary += "; unreachable: " + strings.Join(out.unreachable, ", ")
		}
		c.Fix = "a node is unreachable from others: check it and the network; run redis-cli --cluster check HOST:PORT"
	default:
		c.Summary = fmt.Sprintf("cluster_state ok on %s, all 16384 slots served", plural.Count(len(nodes), "primary", "primaries"))
		if noReplica > 0 {
			c.Summary += r.noReplicaText()
		}
	}
}

// sentinels returns how the limiter reaches the deployment's sentinels
// (addresses, primary's name, TLS), and false when it does not use
// Sentinel.
func (r *run) sentinels() (config.SentinelTarget, bool) {
	st, ok, err := r.opts.Redis.Sentinels()
	if err != nil {
		return config.SentinelTarget{}, false // Client reported it already
	}
	return st, ok
}

func (r *run) checkSentinel(ctx context.Context, c *Check) {
	st, _ := r.sentinels()
	addrs, master := st.Addrs, st.Master
	c.Read = fmt.Sprintf("SENTINEL MASTER, SENTINEL REPLICAS and SENTINEL CKQUORUM %s, and INFO sentinel (TILT), on each of %d sentinels", master, len(addrs))
	up, quorumOK := 0, 0
	// ckFailed counts the sentinels whose SENTINEL CKQUORUM failed, not
	// counting those refusing it to doctor's user (NOPERM): doctor
	// cannot tell what those would say.
	ckFailed := 0
	worst := Pass
	// The fewest replicas any answering sentinel considers up, and the
	// replicas some sentinel knows but considers down: after a failover
	// the dead old primary stays listed (num-slaves counts it), flagged
	// s_down, and cannot be failed over to.
	minUp, maxKnown := -1, 0
	var downReplicas []string
	// The sentinels that answer SENTINEL MASTER that they monitor no
	// primary by that name (SENTINEL REMOVE, or a wrong --redis-master),
	// those that do not answer it (down, frozen, refusing doctor), and
	// those that flag the primary as down: told apart, as the fix of
	// each differs (a review: two of three told SENTINEL REMOVE, the
	// primary up, were "only 1 of 3 sentinels answer", fixed by starting
	// sentinels that all answered PING). Those that answer SENTINEL
	// MASTER with a refusal (NOAUTH, WRONGPASS, NOPERM, maxclients,
	// another error reply) are up: doctor cannot tell whether they
	// monitor the primary, and counts them neither way (a review: one
	// asking for a password doctor was not given was "unreachable ... it
	// does not answer", with the fix to check its reachability).
	var unknown, silent, refused, flagged []string
	var refusals []string // the refusals met (sentinelRefusal), in order
	// The sentinels in TILT mode (INFO sentinel's sentinel_tilt:1): they
	// answer, still vote for a leader, but judge nothing (their flags
	// are not updated, they report no primary down, start no failover).
	var tilted []string
	// The sentinels in TILT whose SENTINEL CKQUORUM failed though the
	// sentinels they know would reach their quorum (tiltStaleCkquorum).
	var tiltCk []string
	// The sentinels that answer SENTINEL MASTER but refuse doctor's
	// user (NOPERM) another read, by read: doctor cannot judge what
	// those reads tell there.
	denied := map[sentinelRead][]string{}
	// Each sentinel seen monitoring the primary, with its own quorum.
	var quorums []sentinelQuorum
	// The passing SENTINEL CKQUORUM replies that count as usable every
	// sentinel their sentinel knows: one that stopped answering is
	// counted until the others flag it s_down, down-after-milliseconds
	// after its last reply. Told apart once doctor knows which sentinels
	// it could not reach itself (silent).
	var allUsable []ckquorumNote
	for _, a := range addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, DialTimeout: 2 * time.Second, ContextTimeoutEnabled: true, TLSConfig: st.TLS,
			Username: st.Username, Password: st.Password})
		// A sentinel at its maxclients limit closes the connection as
		// it takes it: connsetup names that, not "write: broken pipe".
		sc.AddHook(connsetup.Hook{})
		sc.AddHook(r.counter)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := sc.Master(sctx, master).Result()
		if err != nil {
			if ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
				// A sentinel that accepts the connection and never
				// answers (frozen, or its host hung).
				err = fmt.Errorf("no answer within 5s (%w)", err)
			}
			cancel()
			_ = sc.Close()
			worst = max(worst, Warn)
			if noSuchMaster(err) {
				unknown = append(unknown, a)
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: answers, but monitors no primary named %s (SENTINEL MASTER %s: %v)", a, master, master, err))
				continue
			}
			if kind, ok := sentinelRefusal(err); ok {
				refused = append(refused, a)
				if !slices.Contains(refusals, kind) {
					refusals = append(refusals, kind)
				}
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: answers, but refuses doctor's SENTINEL MASTER %s: %v", a, master, err))
				continue
			}
			silent = append(silent, a)
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: SENTINEL MASTER %s failed: %v", a, master, err))
			continue
		}
		up++
		if q, qerr := strconv.Atoi(m["quorum"]); qerr == nil {
			quorums = append(quorums, sentinelQuorum{addr: a, quorum: q})
		}
		replicas, rerr := sc.Replicas(sctx, master).Result()
		q, qerr := sc.CkQuorum(sctx, master).Result()
		infoCmd := redis.NewStringCmd(sctx, "info", "sentinel")
		_ = sc.Process(sctx, infoCmd)
		info, ierr := infoCmd.Result()
		cancel()
		_ = sc.Close()
		for rd, err := range map[sentinelRead]error{readReplicas: rerr, readCkquorum: qerr, readInfo: ierr} {
			if noPerm(err) {
				denied[rd] = append(denied[rd], a)
			}
		}
		tilt, inTilt := sentinelTilt(info)
		if inTilt {
			tilted = append(tilted, a+" ("+tilt+")")
			for i := range quorums {
				quorums[i].tilt = quorums[i].tilt || quorums[i].addr == a
			}
		}
		var replicaText string
		switch {
		case inTilt:
			// Its replicas' flags are as they were when it entered
			// TILT: a replica it flags s_down may be up.
			replicaText = countField(m["num-slaves"], "replica", "replicas") + " (their flags not judged: in TILT they are not updated)"
		case noPerm(rerr):
			replicaText = countField(m["num-slaves"], "replica", "replicas") + " (SENTINEL REPLICAS refused, not judged: " + rerr.Error() + ")"
		case rerr != nil:
			replicaText = countField(m["num-slaves"], "replica", "replicas") + " (SENTINEL REPLICAS failed: " + rerr.Error() + ")"
		default:
			n := 0
			var down []string
			for _, rp := range replicas {
				if replicaUp(rp["flags"]) {
					n++
					continue
				}
				d := nodeAddr(rp) + " (" + rp["flags"] + ")"
				down = append(down, d)
				if !slices.Contains(downReplicas, d) {
					downReplicas = append(downReplicas, d)
				}
			}
			replicaText = plural.Count(n, "replica", "replicas") + " up"
			if len(down) > 0 {
				replicaText += fmt.Sprintf(" (of %d known; down: %s)", len(replicas), strings.Join(down, ", "))
			}
			if minUp < 0 || n < minUp {
				minUp = n
			}
			maxKnown = max(maxKnown, len(replicas))
		}
		line := fmt.Sprintf("%s: %s at %s flags %s, %s, %s, quorum %s",
			a, master, nodeAddr(m), m["flags"], replicaText,
			countField(m["num-other-sentinels"], "other sentinel", "other sentinels"), m["quorum"])
		switch {
		case noPerm(qerr):
			// Not a quorum that cannot be reached: doctor was not
			// let ask (a walk: "the quorum cannot be reached", fail).
			line += "; CKQUORUM refused, quorum not judged by it: " + qerr.Error()
		case qerr != nil && inTilt && tiltStaleCkquorum(m):
			// In TILT it updates no flag: its CKQUORUM counts the
			// other sentinels as they were when it entered TILT, and
			// those it knows would reach its quorum. Doctor's own
			// count judges the quorum (a walk: it had flagged both
			// others s_down, and the check failed with them up).
			tiltCk = append(tiltCk, a)
			line += "; CKQUORUM: " + qerr.Error() + " (not judged: in TILT it updates no flag, so it counts the other sentinels as they were when it entered TILT)"
		case qerr != nil:
			worst = Fail
			ckFailed++
			line += "; CKQUORUM: " + qerr.Error()
		default:
			quorumOK++
			line += "; " + q
			var usable int
			if _, err := fmt.Sscanf(q, "OK %d usable", &usable); err == nil {
				if known, err := strconv.Atoi(m["num-other-sentinels"]); err == nil && usable == known+1 {
					allUsable = append(allUsable, ckquorumNote{evidence: len(c.Evidence), reply: q, usable: usable, downAfter: m["down-after-milliseconds"]})
				}
			}
		}
		switch {
		case inTilt:
			line += "; TILT mode (INFO sentinel: " + tilt + "): it judges nothing until it leaves it"
		case noPerm(ierr):
			line += "; INFO sentinel refused, TILT unknown: " + ierr.Error()
		case ierr != nil:
			line += "; INFO sentinel failed, TILT unknown: " + ierr.Error()
		}
		if m["flags"] != "master" && !inTilt {
			worst = max(worst, Warn)
			flagged = append(flagged, a+" ("+m["flags"]+")")
		}
		c.Evidence = append(c.Evidence, line)
	}
	if len(silent) > 0 {
		// CKQUORUM's count is not doctor's: say so where it quotes it
		// (a walk stopped a sentinel and read "OK 3 usable Sentinels").
		for _, u := range allUsable {
			c.Evidence[u.evidence] = strings.Replace(c.Evidence[u.evidence], "; "+u.reply, "; "+u.reply+" ("+u.stale(silent)+")", 1)
		}
	}
	noReplicaUp := minUp == 0 && maxKnown > 0
	if noReplicaUp {
		worst = max(worst, Warn)
	}
	n := len(addrs)
	majority := n/2 + 1
	// up counts the sentinels seen monitoring the primary; those refusing
	// doctor may monitor it too: up+len(refused) is the most that can.
	noMajority := up+len(refused) < majority
	if noMajority {
		worst = Fail
	} else if up < majority {
		worst = max(worst, Warn) // depends on those refusing doctor
	}
	// judges counts the sentinels seen monitoring the primary out of
	// TILT: only those can report it down to one another.
	judges := up - len(tilted)
	qr := reachQuorum(quorums, judges, len(refused))
	switch {
	case qr.unreachable:
		worst = Fail
	case len(qr.short) > 0:
		worst = max(worst, Warn)
	}
	if len(tilted) > 0 || len(denied) > 0 {
		worst = max(worst, Warn)
	}
	// tiltOnly: the quorum is out of reach only because of the sentinels
	// in TILT, which leave it by themselves: lowering the quorum is not
	// the fix.
	tiltOnly := len(tilted) > 0 && !reachQuorum(untilted(quorums), up, len(refused)).unreachable
	c.Status = worst
	// Every Fail below says a failed primary would not be replaced (no
	// majority, no quorum, CKQUORUM failing), and so does no replica up.
	r.noFailover = worst == Fail || noReplicaUp
	if noMajority && len(unknown) > 0 {
		// No majority monitors the master, and some of those that do
		// not answer that they know no such name: a failover needs a
		// majority of the sentinels to authorize it, and those cannot
		// vote for a primary they forgot.
		c.Summary, c.Fix = sentinelsForgot(master, up, n, unknown, silent, refused, refusals)
		return
	}
	// What the sentinels not seen monitoring the master say or fail to
	// say, and those flagging the primary down, each with its fix.
	var parts, fixes []string
	if len(tilted) > 0 {
		parts = append(parts, tiltPart(tilted))
		fixes = append(fixes, tiltFix)
	}
	if len(tiltCk) > 0 {
		parts = append(parts, fmt.Sprintf("SENTINEL CKQUORUM fails on %s, in TILT: it counts the other sentinels as %s flagged them when %s entered TILT, and doctor counts them itself",
			strings.Join(tiltCk, ", "), pick(len(tiltCk) == 1, "it", "they"), pick(len(tiltCk) == 1, "it", "they")))
	}
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s, but %s no primary named %s: %s the primary",
			plural.Count(len(unknown), "sentinel", "sentinels"), sentinelList(unknown, "answers", "answer"),
			plural.Word(len(unknown), "monitors", "monitor"), master, plural.Word(len(unknown), "it has forgotten", "they have forgotten")))
		fixes = append(fixes, monitorAgainFix(master, unknown))
	}
	if len(silent) > 0 {
		parts = append(parts, fmt.Sprintf("%s (%s): %s", plural.Word(len(silent), "a sentinel is unreachable", fmt.Sprint(len(silent))+" sentinels are unreachable"),
			strings.Join(silent, ", "), plural.Word(len(silent), "it does not answer", "they do not answer")))
	}
	if len(refused) > 0 {
		parts = append(parts, refusedPart(master, refused, refusals))
	}
	if len(flagged) > 0 {
		parts = append(parts, fmt.Sprintf("%s the primary as down: %s", plural.Word(len(flagged), "a sentinel flags", "sentinels flag"), strings.Join(flagged, ", ")))
	}
	if len(silent) > 0 || len(flagged) > 0 {
		fixes = append(fixes, "check every sentinel's log and reachability; failover needs a majority of them")
	}
	if len(refused) > 0 {
		fixes = append(fixes, sentinelRefusalFix(refusals, refused))
	}
	if noReplicaUp {
		parts = append(parts, fmt.Sprintf("no replica of %s is up for the sentinels", master))
		fixes = append(fixes, "start a replica of the current primary")
	}
	permFix := ""
	if len(denied) > 0 {
		parts = append(parts, deniedPart(denied))
		permFix = deniedFix(st.Username, addrs, denied)
		fixes = append(fixes, permFix)
	}
	// seen says how many sentinels monitor the master, as far as doctor
	// can tell.
	seen := fmt.Sprintf("%d of %d still monitor %s", up, n, master)
	// monitors says "N of M sentinels monitor MASTER" truly when some do
	// not answer: those may monitor it (an outside walk read "only 2 of
	// 3 sentinels monitor" with the third stopped).
	monitors := fmt.Sprintf("%d of %d sentinels monitor %s", up, n, master)
	if len(silent) > 0 {
		unreachable := fmt.Sprintf(" (%d unreachable)", len(silent))
		seen = fmt.Sprintf("%d of %d answer and still monitor %s", up, n, master) + unreachable
		monitors = fmt.Sprintf("%d of %d sentinels answer and monitor %s", up, n, master) + unreachable
	}
	if len(refused) > 0 {
		seen += fmt.Sprintf(" as far as doctor can see (%d %s doctor)", len(refused), plural.Word(len(refused), "refuses", "refuse"))
	}
	switch {
	case worst == Pass:
		c.Summary = fmt.Sprintf("%d of %d sentinels see %s up and can reach a quorum to fail over", up, len(addrs), master)
		switch {
		case minUp > 0:
			c.Summary += fmt.Sprintf(", to %s they consider up", plural.Count(minUp, "replica", "replicas"))
		case minUp == 0:
			c.Summary += ", but it has no replica to fail over to"
		}
	case qr.unreachable && !noMajority:
		// A majority may monitor the master, but too few for the
		// quorum each of them is set to: none can judge the primary
		// objectively down, the step before a failover. SENTINEL
		// CKQUORUM does not see it: it counts the sentinels that answer,
		// the primary forgotten or not.
		c.Summary = fmt.Sprintf("only %s, fewer than the %s %s set to", monitors, qr.text(), plural.Word(up, "it is", "they are"))
		if len(tilted) > 0 {
			c.Summary = fmt.Sprintf("only %d of %d sentinels monitor %s out of TILT mode, fewer than the %s they are set to", judges, n, master, qr.text())
			if len(silent) > 0 {
				c.Summary = fmt.Sprintf("only %d of %d sentinels answer and monitor %s out of TILT mode (%d unreachable), fewer than the %s they are set to", judges, n, master, len(silent), qr.text())
			}
			if judges == 0 {
				c.Summary = fmt.Sprintf("no sentinel monitoring %s is out of TILT mode (%s it, set to the %s)", master, plural.Count(up, "monitors", "monitor"), qr.text())
			}
		}
		if len(refused) > 0 {
			c.Summary = fmt.Sprintf("only %d of %d sentinels are seen to monitor %s, and with the %d refusing doctor still fewer than the %s %s set to", up, n, master, len(refused), qr.text(), plural.Word(up, "it is", "they are"))
		}
		if len(parts) > 0 {
			c.Summary += " (" + strings.Join(parts, "; ") + ")"
		}
		c.Summary += ": none of them can judge the primary objectively down (+odown needs a sentinel's quorum of the sentinels monitoring the primary to agree, and a sentinel in TILT reports no primary down), so a failed primary would not be replaced"
		if tiltOnly {
			c.Summary += " until enough of them leave TILT"
		}
		if quorumOK == up && up > 0 {
			c.Summary += fmt.Sprintf(" (SENTINEL CKQUORUM passes: it counts every sentinel it knows and has not flagged down, whether they monitor %s or not, and one that stops answering is flagged down only down-after-milliseconds after its last reply)", master)
			if len(tilted) > 0 {
				c.Summary = strings.TrimSuffix(c.Summary, ")") + ", in TILT or not)"
			}
		}
		c.Fix = lowerQuorumFix(master, quorums, up, majority, n)
		switch {
		case tiltOnly:
			c.Fix = strings.Join(fixes, "; ")
		case len(fixes) > 0:
			c.Fix = strings.Join(fixes, "; ") + "; or " + c.Fix
		}
	case worst == Warn && noReplicaUp && len(unknown)+len(silent)+len(refused)+len(flagged)+len(qr.short)+len(tilted) == 0:
		c.Summary = fmt.Sprintf("no replica of %s is up for the sentinels: the %s they know %s down (%s), so a failed primary could not be replaced",
			master, plural.Word(maxKnown, "replica", "replicas"), plural.Word(maxKnown, "is", "are"), strings.Join(firstN(downReplicas, 3), ", "))
		c.Fix = "start a replica of the current primary (a dead old primary is listed until it comes back as a replica, or SENTINEL RESET " + master + " forgets it)"
	case worst == Warn:
		// A minority of the sentinels does not monitor the master, does
		// not answer, refuses doctor, or flags the primary as down, or
		// some sentinel's quorum is above the sentinels monitoring it.
		if len(parts) == 0 && len(qr.short) == 0 {
			parts = append(parts, "a sentinel is unreachable or flags the primary as down")
			fixes = append(fixes, "check every sentinel's log and reachability; failover needs a majority of them")
		}
		c.Summary = strings.Join(parts, "; ")
		var tail string
		switch {
		case up < majority:
			tail = fmt.Sprintf("%s, not a majority (%d) without those refusing doctor: whether a failover can be authorized depends on them", seen, majority)
		case len(qr.starters) == 0:
			tail = fmt.Sprintf("%s, a majority, but fewer than the %s %s set to: a failover can be authorized only if those refusing doctor monitor it too", seen, qr.text(), plural.Word(up, "it is", "they are"))
		case len(qr.short) > 0:
			tail = fmt.Sprintf("%s, a majority, but only %s %s set to a quorum of at most %d (%s): only %s can start a failover, as a sentinel needs its own quorum of the sentinels monitoring the primary to judge it down, and the others' is above %d (%s)",
				seen, plural.Count(len(qr.starters), "sentinel", "sentinels"), plural.Word(len(qr.starters), "is", "are"), judges, strings.Join(qr.starters, ", "),
				plural.Word(len(qr.starters), "it", "they"), judges, strings.Join(qr.short, ", "))
			if len(tilted) > 0 {
				tail = strings.Replace(tail, ", a majority, but only", fmt.Sprintf(", a majority, %d of them out of TILT, but only", judges), 1)
			}
			if !tiltOnly {
				fixes = append(fixes, lowerQuorumFix(master, quorums, up, majority, n))
			}
		case len(tilted) > 0:
			tail = fmt.Sprintf("%s, a majority, and %d of them out of TILT, no fewer than the %s %s set to: a failover can still be authorized", seen, judges, qr.text(), plural.Word(judges, "it is", "they are"))
		case len(unknown)+len(silent)+len(refused) > 0:
			tail = fmt.Sprintf("%s, a majority, and no fewer than the %s %s set to: a failover can still be authorized", seen, qr.text(), plural.Word(up, "it is", "they are"))
		case len(denied) > 0:
			tail = fmt.Sprintf("%s, a majority, and no fewer than the %s %s set to", seen, qr.text(), plural.Word(up, "it is", "they are"))
		}
		if tail != "" {
			if c.Summary == "" {
				c.Summary = tail
			} else {
				c.Summary += " (" + tail + ")"
			}
		}
		c.Fix = strings.Join(fixes, "; ")
	case noMajority && len(refused) > 0:
		c.Summary = fmt.Sprintf("only %d of %d sentinels are seen to monitor %s, and with the %d refusing doctor still no majority (%s): a failed primary would not be replaced",
			up, n, master, len(refused), strings.Join(parts, "; "))
		if len(silent) > 0 {
			fixes = append([]string{"start the sentinels that do not answer (or fix their addresses: --redis-sentinel, or the hosts of the URL)"}, fixes...)
		}
		c.Fix = strings.Join(fixes, "; ")
	case noMajority:
		c.Summary = fmt.Sprintf("only %d of %d sentinels answer: a failed primary would not be replaced", up, len(addrs))
		if len(silent) > 0 {
			c.Summary = fmt.Sprintf("only %d of %d sentinels answer (%s %s): a failed primary would not be replaced",
				up, len(addrs), strings.Join(silent, ", "), plural.Word(len(silent), "does not", "do not"))
		}
		c.Fix = "start the missing sentinels (at least three, on separate hosts) and check SENTINEL CKQUORUM"
	default:
		c.Summary = fmt.Sprintf("%d of %d sentinels answer, but the quorum cannot be reached (SENTINEL CKQUORUM fails on %d): a failed primary would not be replaced", up, len(addrs), ckFailed)
		c.Fix = "act on what SENTINEL CKQUORUM says (above): each sentinel's quorum and the sentinels it knows (num-other-sentinels), at least three on separate hosts"
	}
	if permFix != "" && !strings.Contains(c.Fix, permFix) {
		// The Fail verdicts above do not turn on the refused reads;
		// the grants are still due.
		c.Summary += "; " + deniedPart(denied)
		c.Fix += "; " + permFix
	}
}

// sentinelRead is a read of the sentinel check after SENTINEL MASTER,
// which a sentinel's ACL may refuse doctor's user (NOPERM).
type sentinelRead int

const (
	readReplicas sentinelRead = iota // SENTINEL REPLICAS
	readCkquorum                     // SENTINEL CKQUORUM
	readInfo                         // INFO sentinel
)

// sentinelReads are the reads a sentinel may refuse, in the order
// doctor names them.
var sentinelReads = []sentinelRead{readReplicas, readCkquorum, readInfo}

// command names the read as sent.
func (r sentinelRead) command() string {
	return [...]string{"SENTINEL REPLICAS", "SENTINEL CKQUORUM", "INFO sentinel"}[r]
}

// grant is the ACL rule that lets a user send the read.
func (r sentinelRead) grant() string {
	return [...]string{"+sentinel|replicas", "+sentinel|ckquorum", "+info"}[r]
}

// unknown says what doctor cannot judge without the read.
func (r sentinelRead) unknown() string {
	return [...]string{"which replicas are up", "whether the quorum can be reached", "whether they are in TILT mode"}[r]
}

// noPerm reports whether err is Redis's refusal of a command to the
// connection's ACL user (NOPERM).
func noPerm(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "NOPERM")
}

// deniedPart is the sentinel check's clause on the sentinels that answer
// SENTINEL MASTER but refuse doctor's user other reads (denied, the
// sentinels refusing each).
func deniedPart(denied map[sentinelRead][]string) string {
	var runs, unknown []string
	for _, r := range sentinelReads {
		if on := denied[r]; len(on) > 0 {
			runs = append(runs, r.command()+" on "+strings.Join(on, ", "))
			unknown = append(unknown, r.unknown())
		}
	}
	return fmt.Sprintf("doctor's sentinel user lacks the permission to run %s (NOPERM), so doctor cannot judge %s there",
		joinAnd(runs), joinAnd(unknown))
}

// deniedFix is the fix of the sentinels (of addrs, in order) that refuse
// reads to doctor's sentinel user (user, "" for the default user): the
// ACL rules to grant on each, those needing the same grouped.
func deniedFix(user string, addrs []string, denied map[sentinelRead][]string) string {
	if user == "" {
		user = "default"
	}
	var order []string          // the grants, in the order first needed
	on := map[string][]string{} // the sentinels needing each grant
	for _, a := range addrs {
		var rules []string
		for _, r := range sentinelReads {
			if slices.Contains(denied[r], a) {
				rules = append(rules, r.grant())
			}
		}
		if len(rules) == 0 {
			continue
		}
		g := strings.Join(rules, " ")
		if _, ok := on[g]; !ok {
			order = append(order, g)
		}
		on[g] = append(on[g], a)
	}
	var cmds []string
	for _, g := range order {
		cmds = append(cmds, fmt.Sprintf("ACL SETUSER %s %s on %s", user, g, strings.Join(on[g], ", ")))
	}
	return fmt.Sprintf("grant doctor's sentinel user (%s, --redis-sentinel-username) what its sentinel check reads: %s (docs/operations.md, Redis ACL users), then run doctor again",
		user, strings.Join(cmds, "; "))
}

// joinAnd joins items as a list: "a", "a and b", "a, b and c".
func joinAnd(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// ckquorumNote is a sentinel's passing SENTINEL CKQUORUM reply that
// counts every sentinel it knows as usable.
type ckquorumNote struct {
	evidence  int    // the index of the sentinel's evidence line
	reply     string // the reply, as quoted there
	usable    int    // the sentinels it counts usable, itself included
	downAfter string // its down-after-milliseconds for the primary
}

// stale says, of a reply counting every sentinel as usable while doctor
// could not reach those at silent, why the count is not doctor's.
func (n ckquorumNote) stale(silent []string) string {
	after := "down-after-milliseconds"
	if n.downAfter != "" {
		after += " (" + n.downAfter + " ms here)"
	}
	return fmt.Sprintf("it counts every one of the %d sentinels it knows, itself included, as usable, yet doctor cannot reach %s: the sentinels flag one that stops answering s_down, and stop counting it, only %s after its last reply, so this count may still include %s",
		n.usable, strings.Join(silent, ", "), after, plural.Word(len(silent), "it", "them"))
}

// sentinelQuorum is a sentinel seen monitoring the primary, and the
// quorum it reports for it (SENTINEL MASTER's quorum).
type sentinelQuorum struct {
	addr   string
	quorum int
	// tilt: the sentinel is in TILT mode (sentinelTilt): it neither
	// reports the primary down to the others nor starts a failover.
	tilt bool
}

// quorumReach is what the quorums of the sentinels monitoring the
// primary allow. A sentinel starts a failover only once it judges the
// primary objectively down (+odown): when its own quorum of sentinels,
// itself included, report it down; a sentinel that has forgotten the
// primary (SENTINEL REMOVE) reports it up, and votes for no leader.
// Each sentinel's own quorum is compared, not the largest: with quorums
// 2 and 3 and two sentinels monitoring, the one set to 2 still starts a
// failover, and the other votes for it (a vote does not depend on the
// voter's quorum). The authorization then needs a majority of the
// sentinels, judged apart (checkSentinel's majority).
type quorumReach struct {
	// starters are the sentinels whose quorum is at most the sentinels
	// seen monitoring the primary: any of them can start a failover.
	starters []string
	// short are the others, "ADDR: quorum Q".
	short []string
	// unreachable: no sentinel's quorum is reached even if every
	// sentinel refusing doctor monitors the primary too.
	unreachable bool
	// low and high are the smallest and largest quorum.
	low, high int
}

// reachQuorum judges qs, the quorums of the up sentinels seen
// monitoring the primary, of which judges are out of TILT, refused more
// that may (they refuse doctor). A sentinel in TILT starts no failover,
// and reports the primary down to no other: it is neither a starter nor
// counted in another's quorum.
func reachQuorum(qs []sentinelQuorum, judges, refused int) quorumReach {
	var r quorumReach
	if len(qs) == 0 {
		return r
	}
	r.low, r.high = qs[0].quorum, qs[0].quorum
	lowJudge := -1 // the lowest quorum of a sentinel out of TILT
	for _, q := range qs {
		r.low, r.high = min(r.low, q.quorum), max(r.high, q.quorum)
		switch {
		case q.tilt:
		case q.quorum <= judges:
			r.starters = append(r.starters, q.addr)
		default:
			r.short = append(r.short, fmt.Sprintf("%s: quorum %d", q.addr, q.quorum))
		}
		if !q.tilt && (lowJudge < 0 || q.quorum < lowJudge) {
			lowJudge = q.quorum
		}
	}
	if lowJudge < 0 {
		// Every one seen is in TILT: only those refusing doctor may
		// judge, each needing its quorum of them.
		r.unreachable = r.low > refused
		return r
	}
	r.unreachable = lowJudge > judges+refused
	return r
}

// text names the quorum the sentinels are set to: "quorum 3", or
// "quorums 2 to 3" when they differ.
func (r quorumReach) text() string {
	if r.low == r.high {
		return fmt.Sprintf("quorum %d", r.low)
	}
	return fmt.Sprintf("quorums %d to %d", r.low, r.high)
}

// lowerQuorumFix is the fix of sentinels set to a quorum above the up
// of n sentinels that monitor master (qs): lower it on those, to a
// majority of the sentinels (the usual value) when that many monitor it.
func lowerQuorumFix(master string, qs []sentinelQuorum, up, majority, n int) string {
	var on []string
	for _, q := range qs {
		if q.quorum > up {
			on = append(on, q.addr)
		}
	}
	return fmt.Sprintf("lower the quorum on %s to at most the %d that monitor it: SENTINEL SET %s quorum %d (a majority of the %d sentinels is the usual quorum; a failover still needs a majority of them to authorize it)",
		strings.Join(on, ", "), up, master, max(1, min(up, majority)), n)
}

// sentinelRefusal reports whether err, a sentinel's failed SENTINEL
// MASTER, is a refusal: the sentinel answered, with an error reply other
// than "No such master" (NOAUTH or WRONGPASS for doctor's credentials,
// NOPERM for its ACL user's permissions, another error, such as a Redis
// server's "ERR unknown command 'sentinel'"), or closed the connection
// at its maxclients limit. It returns what refused: NOAUTH, WRONGPASS,
// NOPERM, maxclients, or the reply.
func sentinelRefusal(err error) (string, bool) {
	if connRefused(err) {
		return "maxclients", true
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return "", false
	}
	msg := reply.Error()
	for _, k := range []string{"NOAUTH", "WRONGPASS", "NOPERM"} {
		if strings.HasPrefix(msg, k) {
			return k, true
		}
	}
	return msg, true
}

// refusedPart is the sentinel check's clause on the sentinels at addrs,
// which refuse doctor (kinds, from sentinelRefusal).
func refusedPart(master string, addrs, kinds []string) string {
	return fmt.Sprintf("%s %s, but %s doctor (%s): doctor cannot tell whether %s %s",
		plural.Count(len(addrs), "sentinel", "sentinels"), sentinelList(addrs, "answers", "answer"),
		plural.Word(len(addrs), "refuses", "refuse"), strings.Join(kinds, "; "),
		plural.Word(len(addrs), "it monitors", "they monitor"), master)
}

// sentinelRefusalFix is the fix of the sentinels at addrs, which refuse
// doctor (kinds, from sentinelRefusal).
func sentinelRefusalFix(kinds, addrs []string) string {
	var auth, perm, full, other bool
	for _, k := range kinds {
		switch k {
		case "NOAUTH", "WRONGPASS":
			auth = true
		case "NOPERM":
			perm = true
		case "maxclients":
			full = true
		default:
			other = true
		}
	}
	var fixes []string
	if auth {
		fixes = append(fixes, "give doctor the sentinels' own user and password, those the instances use: --redis-sentinel-password-file and --redis-sentinel-username (--redis-password-file goes to the primary only), then run doctor again")
	}
	if perm {
		fixes = append(fixes, "grant doctor's sentinel user (--redis-sentinel-username) +sentinel|master +sentinel|replicas +sentinel|ckquorum +info on "+strings.Join(addrs, ", ")+" (docs/operations.md, Redis ACL users)")
	}
	if full {
		fixes = append(fixes, sentinelMaxclientsFix)
	}
	if other {
		fixes = append(fixes, "check that "+strings.Join(addrs, ", ")+" "+plural.Word(len(addrs), "is a sentinel's address", "are sentinels' addresses")+
			" (--redis-sentinel, or the hosts of the URL: a sentinel's port, 26379 by default, not a Redis server's) and act on the reply quoted above")
	}
	return strings.Join(fixes, "; ")
}

// noSuchMaster reports whether err is a sentinel's answer that it
// monitors no primary by the name asked (SENTINEL MASTER: "ERR No such
// master with that name"): it answers, and has forgotten the primary or
// never knew it.
func noSuchMaster(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.Contains(reply.Error(), "No such master")
}

// sentinelList names addrs after the verb for one or many: "1 sentinel
// (A) does not answer", "2 sentinels (A, B) do not answer".
func sentinelList(addrs []string, one, many string) string {
	return "(" + strings.Join(addrs, ", ") + ") " + plural.Word(len(addrs), one, many)
}

// monitorAgainFix is the fix of the sentinels at addrs that monitor no
// primary by the name master.
func monitorAgainFix(master string, addrs []string) string {
	return fmt.Sprintf("check --redis-master (or master= in the URL) against SENTINEL MASTERS on each sentinel; if %q is right, SENTINEL MONITOR %s <primary ip> <port> <quorum> again on %s (it was removed, SENTINEL REMOVE, or never added), with the others' settings (SENTINEL SET %s down-after-milliseconds, failover-timeout)",
		master, master, strings.Join(addrs, ", "), master)
}

// sentinelsForgot returns the sentinel check's summary and fix when no
// majority of the sentinels monitors master (up of n do) and those at
// unknown answer that they monitor no primary by that name; those at
// silent do not answer; those at refused refuse doctor (kinds, from
// sentinelRefusal), and may monitor it: no majority even with them.
func sentinelsForgot(master string, up, n int, unknown, silent, refused, kinds []string) (summary, fix string) {
	summary = fmt.Sprintf("%d of %d sentinels %s, but %s no primary named %s: the primary is forgotten by %s",
		len(unknown), n, sentinelList(unknown, "answers", "answer"), plural.Word(len(unknown), "monitors", "monitor"), master, plural.Word(len(unknown), "it", "them"))
	fix = monitorAgainFix(master, unknown)
	if len(silent) > 0 {
		summary += fmt.Sprintf(", and %d %s", len(silent), sentinelList(silent, "does not answer", "do not answer"))
		fix += "; start the sentinels that do not answer (or fix their addresses: --redis-sentinel, or the hosts of the URL)"
	}
	if len(refused) > 0 {
		summary += fmt.Sprintf(", and %d %s doctor (%s), whether %s %s it unknown", len(refused), sentinelList(refused, "refuses", "refuse"),
			strings.Join(kinds, "; "), plural.Word(len(refused), "it", "they"), plural.Word(len(refused), "monitors", "monitor"))
		fix += "; " + sentinelRefusalFix(kinds, refused)
	}
	summary += fmt.Sprintf("; only %d of %d monitor it, no majority, so a failed primary would not be replaced (a failover needs a majority of the sentinels to authorize it)", up, n)
	if up > 0 {
		summary += fmt.Sprintf("; new connections go to the primary the %s that still %s it %s", plural.Word(up, "sentinel", "sentinels"), plural.Word(up, "monitors", "monitor"), plural.Word(up, "names", "name"))
	}
	return summary, fix
}

// nodeAddr returns the host:port of a node described by SENTINEL MASTER
// or SENTINEL REPLICAS (its ip and port fields), an IPv6 address in
// brackets: "[::1]:6380", not "::1:6380".
func nodeAddr(fields map[string]string) string {
	return net.JoinHostPort(fields["ip"], fields["port"])
}

// replicaUp reports whether a replica's SENTINEL REPLICAS flags say the
// sentinel considers it up: not subjectively or objectively down, not
// disconnected.
func replicaUp(flags string) bool {
	for _, f := range strings.Split(flags, ",") {
		switch f {
		case "s_down", "o_down", "disconnected":
			return false
		}
	}
	return true
}

// probeTarget is a primary and a probe key in a slot it serves.
type probeTarget struct {
	node
	key string
}

// probeTargets returns a probe key for each primary: on a Cluster, one
// hashing to a slot the primary serves (from CLUSTER SLOTS), so that each
// primary is timed directly.
func (r *run) probeTargets(ctx context.Context, nodes []node) []probeTarget {
	base := r.opts.Prefix + ":doctor:probe"
	if r.cluster == nil {
		out := make([]probeTarget, len(nodes))
		for i, n := range nodes {
			out[i] = probeTarget{n, base}
		}
		return out
	}
	// The slot map from the first primary that answers, those the server
	// check could not read skipped: the cluster client asks a node at
	// random, and a frozen one cost 5s and left no primary to probe.
	var slots []redis.ClusterSlot
	err := errors.New("no primary answered CLUSTER SLOTS")
	for _, n := range append(slices.Clone(nodes), node{}) {
		if n.client != nil && slices.Contains(r.unreadAddrs, n.addr) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if n.client == nil {
			//lint:ignore SA1019 CLUSTER SLOTS is deprecated but served by every Redis since 3.0; CLUSTER SHARDS needs 7.0.
			slots, err = r.cluster.ClusterSlots(clusterslots.Unguarded(sctx)).Result()
		} else {
			//lint:ignore SA1019 CLUSTER SLOTS is deprecated but served by every Redis since 3.0; CLUSTER SHARDS needs 7.0.
			slots, err = n.client.ClusterSlots(clusterslots.Unguarded(sctx)).Result()
		}
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil
	}
	var out []probeTarget
	for _, n := range nodes {
		var mine []slotRange
		for _, s := range slots {
			if len(s.Nodes) > 0 && s.Nodes[0].Addr == n.addr {
				mine = append(mine, slotRange{int(s.Start), int(s.End)})
			}
		}
		for i := 0; i < 100_000 && len(mine) > 0; i++ {
			k := fmt.Sprintf("%s:{%d}", base, i)
			sl := redisstore.Slot(k)
			if slices.ContainsFunc(mine, func(r slotRange) bool { return sl >= r.start && sl <= r.end }) {
				out = append(out, probeTarget{n, k})
				break
			}
		}
	}
	return out
}

// probeResult is what the probe of one primary measured.
type probeResult struct {
	samples  []time.Duration // round trips of the successful calls, the first call excepted
	calls    int             // calls made
	failed   int             // calls that failed
	refused  int             // failed calls Redis refused to doctor's ACL user (NOPERM...)
	firstErr error           // the first failure
	otherErr error           // the first failure that is not a refusal
}

// maxProbeFailures is the number of failed calls after which the probe of
// a primary stops: enough to tell a passing error from a lasting one
// without piling timeouts onto a primary that does not answer.
const maxProbeFailures = 3

// probeGap and probeSpread pace the latency probe: a pause separates
// each call from the one before, so that the calls spread over the probe's
// window and a Redis stalled most of the time (a long command, a fork,
// swapping) is sampled while it stalls. Calls made back to back, in a
// millisecond, passed a Redis blocked 90% of the time with p99 52µs (an
// outside walk): they all fell in one pause between two stalls.
const (
	probeGap    = 50 * time.Millisecond
	probeSpread = 2500 * time.Millisecond
)

// probeInterval is the pause between two probe calls: 50 ms, less when
// samples × 50 ms would exceed probeSpread.
func probeInterval(samples int) time.Duration {
	if samples <= 1 {
		return 0
	}
	return min(probeGap, probeSpread/time.Duration(samples))
}

// probe times up to LatencySamples calls of the probe script on one
// primary, paused probeInterval apart, for at most 3s; the first call,
// which may load the script, is not kept. A failed call is counted, not
// timed.
func (r *run) probe(ctx context.Context, t probeTarget) probeResult {
	var res probeResult
	deadline := time.Now().Add(3 * time.Second)
	gap := probeInterval(r.opts.LatencySamples)
	for i := 0; i < r.opts.LatencySamples && time.Now().Before(deadline) && res.failed < maxProbeFailures; i++ {
		if i > 0 && gap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(gap):
			}
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		t0 := time.Now()
		err := probeScript.Run(pctx, t.client, []string{t.key}).Err()
		d := time.Since(t0)
		cancel()
		res.calls++
		if err != nil && !redisnil.IsReply(err) {
			res.failed++
			if classify(ctx, err) == errNoPerm {
				res.refused++
			} else if res.otherErr == nil {
				res.otherErr = err
			}
			if res.firstErr == nil {
				res.firstErr = err
			}
			if ctx.Err() != nil {
				break // the run's time is over: every further call fails the same way
			}
			continue
		}
		if i > 0 {
			res.samples = append(res.samples, d)
		}
	}
	return res
}

// probeScript is the latency probe: one read of one key's TTL, under the
// prefix, so that its cost is a script call's round trip.
var probeScript = redis.NewScript(probeSource)

// probeSource is the probe script's source, the only script doctor's
// Redis client lets through (see ownScript).
const probeSource = "return redis.call('PTTL', KEYS[1])"

// latencyWarn and latencyFail are the p99 thresholds of the probe: 50 ms
// is the alert threshold of the shipped rules and the default decision
// budget of the fallback.
var (
	latencyWarn = 10 * time.Millisecond
	latencyFail = 50 * time.Millisecond
)

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)) + 0.5)
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func (r *run) checkLatency(ctx context.Context, c *Check, nodes []node) {
	c.Read = fmt.Sprintf("up to %d EVALSHA of a read-only probe script (PTTL of a %s:doctor:probe key), %v apart, within 3s on each primary; INFO commandstats and LATENCY LATEST on each primary (and CONFIG GET latency-monitor-threshold where it has no event)", r.opts.LatencySamples, r.opts.Prefix, probeInterval(r.opts.LatencySamples))
	latency := Pass            // the verdict of the successful calls alone
	var p50, p99 time.Duration // of the slowest primary
	timed := 0                 // primaries with at least one timed call
	calls, failed, failedOn, refused := 0, 0, 0, 0
	var firstErr, otherErr error
	var firstErrAddr string
	var failureFixes []string // one per kind of failure the primaries met, in order
	eventStatus := Pass       // the verdict of LATENCY LATEST's recent events
	var eventWorst latencyEvent
	var eventAddr string
	var eventAge time.Duration
	targets := r.probeTargets(ctx, nodes)
	// The primaries are probed at once, each over the same window.
	results := make([]probeResult, len(targets))
	var wg sync.WaitGroup
	for i, n := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.probe(ctx, n)
		}()
	}
	wg.Wait()
	for i, n := range targets {
		res := results[i]
		calls += res.calls
		if res.failed > 0 {
			failed += res.failed
			refused += res.refused
			if otherErr == nil {
				otherErr = res.otherErr
			}
			if res.otherErr != nil {
				// Each primary's own failure: a frozen primary times out
				// while the others answer CLUSTERDOWN, and each has its fix.
				if f := r.probeFailureFix(ctx, res.otherErr); !slices.Contains(failureFixes, f) {
					failureFixes = append(failureFixes, f)
				}
			}
			failedOn++
			if firstErr == nil {
				firstErr, firstErrAddr = res.firstErr, n.addr
			}
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: probe failed: %d of %s failed, first: %v", n.addr, res.failed, plural.Count(res.calls, "call", "calls"), res.firstErr))
		}
		samples := res.samples
		if len(samples) == 0 {
			continue
		}
		timed++
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		a, b := percentile(samples, 0.5), percentile(samples, 0.99)
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s: probe from this host: %s, p50 %v, p99 %v, max %v", n.addr, plural.Count(len(samples), "call", "calls"), a.Round(time.Microsecond), b.Round(time.Microsecond), samples[len(samples)-1].Round(time.Microsecond)))
		if b >= p99 {
			p50, p99 = a, b
		}
		switch {
		case b > r.latencyFail():
			latency = Fail
		case b > r.latencyWarn():
			latency = max(latency, Warn)
		}
	}
	if timed == 0 && failed == 0 {
		c.Evidence = append(c.Evidence, "no probe could be timed")
	}
	for _, n := range nodes {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := n.client.Info(sctx, "commandstats").Result()
		if err == nil {
			cs := parseInfo(s)
			for _, cmd := range []string{"evalsha", "eval", "evalsha_ro"} {
				if v, ok := cs["cmdstat_"+cmd]; ok {
					f := parseFields(v)
					c.Evidence = append(c.Evidence, fmt.Sprintf("%s: %s calls %s, %s µs per call, failed %s, rejected %s (since restart or CONFIG RESETSTAT)",
						n.addr, strings.ToUpper(cmd), f["calls"], f["usec_per_call"], orZero(f["failed_calls"]), orZero(f["rejected_calls"])))
				}
			}
		}
		ev, err := n.client.Do(sctx, "LATENCY", "LATEST").Slice()
		if err == nil {
			if len(ev) == 0 {
				line := n.addr + ": LATENCY LATEST has no events"
				if m, err := n.client.ConfigGet(sctx, "latency-monitor-threshold").Result(); err == nil && m["latency-monitor-threshold"] == "0" {
					line += ": the latency monitor is off (latency-monitor-threshold 0), so Redis records no stall; CONFIG SET latency-monitor-threshold 100 (and in redis.conf) has it record every event of 100 ms or more"
				} else if err == nil {
					line += fmt.Sprintf(" (none of %s ms or more, latency-monitor-threshold)", m["latency-monitor-threshold"])
				}
				c.Evidence = append(c.Evidence, line)
			}
			now := r.redisNow(n.addr)
			for _, e := range ev {
				le, ok := parseLatencyEvent(e)
				if !ok {
					continue
				}
				age := max(now.Sub(le.at), 0)
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s: latency event %s: latest %d ms, %v ago, max %d ms", n.addr, le.name, le.latest.Milliseconds(), age.Round(time.Second), le.max.Milliseconds()))
				if age > recentEvent {
					continue
				}
				st := Pass
				switch {
				case le.latest > r.latencyFail():
					st = Fail
				case le.latest > r.latencyWarn():
					st = Warn
				}
				if st > eventStatus || (st == eventStatus && st > Pass && le.latest > eventWorst.latest) {
					eventStatus, eventWorst, eventAddr, eventAge = st, le, n.addr, age
				}
			}
		}
		cancel()
	}
	// What the successful calls measured, on its own.
	var measured, latencyFix string
	switch latency {
	case Pass:
		measured = fmt.Sprintf("script round trip p50 %v, p99 %v on the slowest primary (warn above %v)", p50.Round(time.Microsecond), p99.Round(time.Microsecond), r.latencyWarn())
	case Warn:
		measured = fmt.Sprintf("script round trip p99 %v is above %v", p99.Round(time.Microsecond), r.latencyWarn())
		latencyFix = "look for slow commands (SLOWLOG GET), a busy or swapping host, or a far network; decisions near the budget fall back"
	default:
		measured = fmt.Sprintf("script round trip p99 %v is above %v, the default decision budget", p99.Round(time.Microsecond), r.latencyFail())
		latencyFix = "decisions this slow are taken by the fallback: fix Redis's latency (SLOWLOG GET, host load, network) before relying on it"
	}
	switch {
	case failed > 0 && refused == failed:
		// Redis refused the probe script to doctor's ACL user, as it
		// refuses other reads: the latency could not be measured, which
		// is not a latency found wrong. Decisions run as Floodgate's own
		// user, whose permissions this says nothing about.
		c.Status = max(Warn, latency)
		c.Summary = fmt.Sprintf("Redis refused the latency probe (%s: %v): doctor's ACL user may not run its probe script, on %d of %s",
			firstErrAddr, firstErr, failedOn, plural.Count(len(targets), "primary", "primaries"))
		c.Fix = probePermissionFix()
		switch {
		case timed == 0:
			c.Summary += "; the latency is unknown (not measured, not found wrong)"
		case latency == Pass:
			c.Summary += fmt.Sprintf("; the other calls took p99 %v (below %v)", p99.Round(time.Microsecond), r.latencyWarn())
		default:
			c.Summary += "; of the other calls, " + measured
			c.Fix += "; and " + latencyFix
		}
	case failed > 0:
		// A failed call measures nothing: the verdict is the failure, and
		// the fix is the failure's, not Redis's latency.
		c.Status = Fail
		c.Summary = fmt.Sprintf("the latency probe failed: %d of %s failed, on %d of %s (first: %s: %v)",
			failed, plural.Count(calls, "call", "calls"), failedOn, plural.Count(len(targets), "primary", "primaries"), firstErrAddr, firstErr)
		c.Fix = r.probeFailureFix(ctx, otherErr)
		if len(failureFixes) > 0 {
			c.Fix = strings.Join(failureFixes, "; ")
		}
		if refused > 0 {
			c.Fix += "; for the refused calls: " + probePermissionFix()
		}
		switch {
		case timed == 0:
			c.Summary += "; no call succeeded, so the latency is unknown"
		case latency == Pass:
			c.Summary += fmt.Sprintf("; the successful calls took p99 %v (below %v)", p99.Round(time.Microsecond), r.latencyWarn())
		default:
			c.Summary += "; of the successful calls, " + measured
			c.Fix += "; and " + latencyFix
		}
	case timed == 0 && calls > 0:
		c.Status = Warn
		c.Summary = "script round trip could not be measured: only the first call of each primary was made, and it is not timed (it may load the script)"
		c.Fix = "give more --latency-samples (the default is 50)"
	case timed == 0:
		c.Status = Warn
		c.Summary = "script round trip could not be measured: no primary to probe"
		c.Fix = "check that the Cluster's slots are assigned (CLUSTER SLOTS) and the primaries reachable"
	default:
		c.Status, c.Summary, c.Fix = latency, measured, latencyFix
	}
	if eventStatus > Pass && eventStatus >= c.Status {
		// Redis itself saw a stall the probe may have missed: a latency
		// event of the last minute above the thresholds.
		limit := r.latencyWarn()
		if eventStatus == Fail {
			limit = r.latencyFail()
		}
		ev := fmt.Sprintf("Redis recorded a latency event %v ago on %s: %s took %d ms (above %v; LATENCY LATEST)", eventAge.Round(time.Second), eventAddr, eventWorst.name, eventWorst.latest.Milliseconds(), limit)
		if c.Status > Pass {
			c.Summary = ev + "; " + c.Summary
		} else {
			c.Summary = ev + "; the probe measured " + measured
		}
		fix := "while Redis stalls every decision waits, and those past the budget fall back: find what blocks it (LATENCY HISTORY " + eventWorst.name + ", LATENCY DOCTOR, SLOWLOG GET; a long command, a fork for persistence, swapping)"
		if c.Fix == "" {
			c.Fix = fix
		} else {
			c.Fix = fix + "; " + c.Fix
		}
		c.Status = eventStatus
	}
}

// recentEvent is how old a LATENCY LATEST event may be and still judge
// the latency check: older ones are listed only.
const recentEvent = time.Minute

// latencyEvent is one entry of LATENCY LATEST.
type latencyEvent struct {
	name        string
	at          time.Time // of the latest event
	latest, max time.Duration
}

// parseLatencyEvent parses one entry of LATENCY LATEST: the event's name,
// the Unix time of its latest occurrence, its latency and the highest
// since the event was first recorded, in milliseconds.
func parseLatencyEvent(e any) (latencyEvent, bool) {
	f, ok := e.([]any)
	if !ok || len(f) < 4 {
		return latencyEvent{}, false
	}
	name, ok := f[0].(string)
	at, ok1 := f[1].(int64)
	latest, ok2 := f[2].(int64)
	most, ok3 := f[3].(int64)
	if !ok || !ok1 || !ok2 || !ok3 {
		return latencyEvent{}, false
	}
	return latencyEvent{name: name, at: time.Unix(at, 0), latest: time.Duration(latest) * time.Millisecond, max: time.Duration(most) * time.Millisecond}, true
}

// redisNow is Redis's clock on the primary addr, from its INFO
// (server_time_usec, read by the server check) when it has it, else this
// host's.
func (r *run) redisNow(addr string) time.Time {
	if us, err := strconv.ParseInt(r.info[addr]["server_time_usec"], 10, 64); err == nil && us > 0 {
		return time.UnixMicro(us)
	}
	return r.opts.Now()
}

// probeFailureFix says what to do about the error that failed the latency
// probe: it is not a latency problem.
func (r *run) probeFailureFix(ctx context.Context, err error) string {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	case ctx.Err() != nil:
		return "doctor's own time ran out (--timeout, default 2m) before the probe could finish: run it again with a longer --timeout"
	case connRefused(err):
		return maxclientsFix
	case strings.HasPrefix(msg, "CLUSTERDOWN"):
		return r.clusterDownFix()
	case strings.HasPrefix(msg, "TRYAGAIN"), strings.HasPrefix(msg, "ASK"), strings.HasPrefix(msg, "MOVED"):
		return "the probe's slot is being moved between primaries: finish or undo the resharding (redis-cli --cluster fix HOST:PORT)"
	case errors.Is(err, context.DeadlineExceeded), strings.Contains(msg, "i/o timeout"):
		return "a primary did not answer a probe call within 1s: check that it is up and not blocked (a long command, a fork, swapping) and the network from this host"
	case strings.HasPrefix(msg, "BUSY"):
		return "a script is running too long on that primary (BUSY): every decision waits behind it; find it (SCRIPT KILL once identified) and check the instances' scripts"
	case strings.HasPrefix(msg, "LOADING"):
		return "that primary is loading its dataset after a restart: decisions fail until it is done; run doctor again afterwards"
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "EOF"), strings.Contains(msg, "connection reset"):
		return "a primary does not answer: check that it is up and reachable from this host"
	}
	return "read the error: the probe is one EVALSHA of a read-only script, and decisions make the same kind of call, so they fail the same way"
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

func (r *run) latencyWarn() time.Duration {
	if r.opts.LatencyWarn > 0 {
		return r.opts.LatencyWarn
	}
	return latencyWarn
}

func (r *run) latencyFail() time.Duration {
	if r.opts.LatencyFail > 0 {
		return r.opts.LatencyFail
	}
	return latencyFail
}

// sentinelDiagnosis says why a Sentinel deployment could not be reached:
// go-redis reports every sentinel "unreachable" when they all answer that
// they monitor no primary by the name given, and only its deadline
// ("context deadline exceeded") when no sentinel answers at all. It asks
// each sentinel for the primary's address (SENTINEL
// GET-MASTER-ADDR-BY-NAME) and returns "" when r is not a Sentinel
// deployment; when no sentinel answers, the diagnosis names each one's
// error (connection refused, a TLS failure...), and so it does when they
// answer with errors (a Redis server's address given: ERR unknown command
// 'sentinel'; NOAUTH), or all refused the TLS handshake (tlsRefusal),
// saying they answered. replaces reports a
// diagnosis that makes go-redis's error useless or wrong (the name is
// unknown, nothing unreachable; or no sentinel answers). When no sentinel
// answers, first is the first sentinel's error, for tlsHint to classify
// as it does a standalone server's: the probe's own error is then often
// go-redis's deadline, which says nothing of TLS.
func (r *run) sentinelDiagnosis(ctx context.Context) (why string, replaces bool, first error) {
	st, ok := r.sentinels()
	if !ok {
		return "", false, nil
	}
	var unknown, primaries, failed []string
	named := map[string]bool{} // the primaries named
	var firstErr error
	answered := false // some server answered with an error reply
	tlsRefused := 0   // sentinels whose TLS handshake was refused, by them or by doctor
	resets := 0       // sentinels that reset or closed the connection
	refusedConns := 0 // sentinels that closed a new connection during its setup (maxclients)
	for _, a := range st.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, DialTimeout: 2 * time.Second, ContextTimeoutEnabled: true, TLSConfig: st.TLS, MaxRetries: -1,
			Username: st.Username, Password: st.Password})
		// A sentinel at its maxclients limit closes the connection as
		// it takes it: connsetup names that, not "write: broken pipe".
		sc.AddHook(connsetup.Hook{})
		sc.AddHook(r.counter)
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		addr, err := sc.GetMasterAddrByName(sctx, st.Master).Result()
		cancel()
		_ = sc.Close()
		switch {
		case redisnil.IsReply(err):
			unknown = append(unknown, a)
		case err == nil && len(addr) == 2:
			named[net.JoinHostPort(addr[0], addr[1])] = true
			primaries = append(primaries, a+" names "+net.JoinHostPort(addr[0], addr[1]))
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s: %v", a, strings.TrimSpace(err.Error())))
			if firstErr == nil {
				firstErr = err
			}
			var reply redis.Error
			answered = answered || errors.As(err, &reply)
			switch {
			case connRefused(err) && !tlsRefusal(err):
				refusedConns++
			case tlsRefusal(err):
				if tlsRefused == 0 {
					firstErr = err // the refusal says more than a reset before it
				}
				tlsRefused++
			case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF):
				// Under TLS 1.3 a server refusing the client's
				// certificate sends its alert after the client's
				// handshake is done: a client that writes first
				// may meet a reset instead of the alert.
				resets++
			}
		}
	}
	switch {
	case len(unknown) == 0 && len(primaries) == 0 && tlsRefused > 0 && tlsRefused+resets == len(failed):
		// Each sentinel took the connection and its handshake failed (a
		// TLS alert sent or received): they are up and reachable, the
		// fix (tlsHint, from first) says what to change.
		return fmt.Sprintf("every sentinel refused the TLS handshake, or sent a certificate doctor refused (%s): they are reachable, the certificates are at fault",
			strings.Join(failed, "; ")), true, firstErr
	case len(unknown) == 0 && len(primaries) == 0 && len(failed) > 0 && refusedConns == len(failed):
		return fmt.Sprintf("every sentinel closed doctor's new connection during its setup (%s): "+sentinelsAtMaxclients,
			strings.Join(failed, "; ")), true, firstErr
	case len(unknown) == 0 && len(primaries) == 0 && len(failed) > 0 && !answered:
		return fmt.Sprintf(noSentinelAnswers+" (%s): check the sentinel addresses (--redis-sentinel, or the hosts of the URL) and that the sentinels are up and reachable from here",
			strings.Join(failed, "; ")), true, firstErr
	case len(unknown) == 0 && len(primaries) == 0 && len(failed) > 0:
		// A reply such as ERR unknown command 'sentinel' (a Redis
		// server's address given) or NOAUTH: the server is reachable.
		return fmt.Sprintf("no sentinel gives the address of primary %q (%s): check the sentinel addresses (--redis-sentinel, or the hosts of the URL: a sentinel's port, 26379 by default, not a Redis server's) and the sentinels' own password (--redis-sentinel-password-file; --redis-password-file goes to the primary only)",
			st.Master, strings.Join(failed, "; ")), true, nil
	case len(unknown) > 0 && len(primaries) == 0:
		return fmt.Sprintf("the sentinels at %s answer, but monitor no primary named %q: check --redis-master (or master= in the URL) against their SENTINEL MASTERS",
			strings.Join(unknown, ", "), st.Master), true, nil
	case len(primaries) > 0 && 2*len(unknown) > len(st.Addrs):
		// A majority answered, that they do not know the master: the
		// Follower forgot the primary, and doctor's client dialed the
		// one the others name (go-redis asks the sentinels).
		return fmt.Sprintf("a majority of the sentinels (%s) answer, but monitor no primary named %q: check --redis-master (or master= in the URL) against their SENTINEL MASTERS, or SENTINEL MONITOR it again (after a SENTINEL REMOVE); doctor dialed the primary the others name (%s), and it does not answer",
			strings.Join(unknown, ", "), st.Master, strings.Join(primaries, "; ")), true, nil
	case len(primaries) > 0 && 2*len(primaries) <= len(st.Addrs) && len(named) > 1:
		// No majority, and those that answer disagree: doctor's client
		// picked none, and asked the sentinels as go-redis does, waiting
		// for those that do not answer. No primary was tried.
		return fmt.Sprintf("only %d of %d sentinels answer (%s; %s), and they name different primaries: %s, so doctor did not pick one and its probe waited for the sentinels that do not answer",
			len(primaries), len(st.Addrs), strings.Join(primaries, "; "), strings.Join(failed, "; "), noMajority), true, nil
	case len(primaries) > 0 && 2*len(primaries) <= len(st.Addrs):
		// No majority: doctor's client dialed the primary those that
		// answer name (sentinelfollow's DialMinority), and it failed.
		return fmt.Sprintf("only %d of %d sentinels answer (%s; %s): %s; doctor dialed the primary they name, %s",
			len(primaries), len(st.Addrs), strings.Join(primaries, "; "), strings.Join(failed, "; "), noMajority, primarySilent), false, nil
	case len(primaries) > 0:
		r.primaryNamed = true
		return fmt.Sprintf("the sentinels answer (%s), %s", strings.Join(primaries, "; "), primarySilent), false, nil
	}
	return "", false, nil
}

// tlsRefusal reports whether err is a TLS handshake's refusal: an alert
// the server sent (remote error: tls: expired certificate) or its
// certificate failing doctor's verification. Either way the server
// answered.
func tlsRefusal(err error) bool {
	var verify *tls.CertificateVerificationError
	return errors.As(err, &verify) || strings.Contains(err.Error(), "remote error: tls: ")
}

// openSlots returns the slots that CLUSTER NODES output says this node
// ("myself") is migrating to another node ("3000 migrating") or importing
// from one ("3000 importing"), from the entries [slot->-id] and [slot-<-id].
func openSlots(clusterNodes string) []string {
	var out []string
	for _, line := range strings.Split(clusterNodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !slices.Contains(strings.Split(f[2], ","), "myself") {
			continue
		}
		for _, e := range f[8:] {
			if !strings.HasPrefix(e, "[") {
				continue
			}
			e = strings.Trim(e, "[]")
			if slot, _, ok := strings.Cut(e, "->-"); ok {
				out = append(out, slot+" migrating")
			} else if slot, _, ok := strings.Cut(e, "-<-"); ok {
				out = append(out, slot+" importing")
			}
		}
	}
	return out
}

// countField writes a count Redis reported as text (a field of SENTINEL
// MASTER) with the noun that agrees with it: countField("1", "replica",
// "replicas") is "1 replica". A field that is not an integer is written
// as it is, with many.
func countField(field, one, many string) string {
	n, err := strconv.Atoi(field)
	if err != nil {
		return field + " " + many
	}
	return plural.Count(n, one, many)
}

// tiltFix is the fix of sentinels in TILT mode.
const tiltFix = "a sentinel enters TILT when its timer runs late or backwards: its host's clock stepped (set it to slew, NTP's usual mode, not step), or the process stalled (a paused VM or container, a host swapping or starved of CPU); its log says +tilt when it enters and -tilt when it leaves, by itself, once its timer has run steadily for the tilt period (30s by default): find and remove the cause, then run doctor again"

// tiltPart is the sentinel check's clause on the sentinels in TILT mode
// (each "ADDR (TILT for Ns)").
func tiltPart(tilted []string) string {
	one := len(tilted) == 1
	return fmt.Sprintf("%s in TILT mode (%s): until %s, %s no primary down to the other sentinels, %s no failover and %s no flag (%s still %s for a leader)",
		plural.Count(len(tilted), "sentinel is", "sentinels are"), strings.Join(tilted, ", "),
		pick(one, "it leaves it", "they leave it"), pick(one, "it reports", "they report"), pick(one, "starts", "start"),
		pick(one, "updates", "update"), pick(one, "it", "they"), pick(one, "votes", "vote"))
}

// tiltStaleCkquorum reports whether a sentinel in TILT whose SENTINEL
// CKQUORUM failed knows enough sentinels (num-other-sentinels, and
// itself) for its quorum, and so for the majority of them: its failure
// then comes from the flags it set on them before TILT, which TILT does
// not update, not from its configuration.
func tiltStaleCkquorum(m map[string]string) bool {
	known, err := strconv.Atoi(m["num-other-sentinels"])
	if err != nil {
		return false
	}
	q, err := strconv.Atoi(m["quorum"])
	return err == nil && known+1 >= q
}

// pick returns one when one is true, else many.
func pick(one bool, a, b string) string {
	if one {
		return a
	}
	return b
}

// untilted returns qs with no sentinel in TILT: as the quorums would
// stand once every sentinel left it.
func untilted(qs []sentinelQuorum) []sentinelQuorum {
	out := make([]sentinelQuorum, len(qs))
	for i, q := range qs {
		out[i] = sentinelQuorum{addr: q.addr, quorum: q.quorum}
	}
	return out
}

// sentinelTilt reads a sentinel's INFO sentinel: whether it is in TILT
// mode (sentinel_tilt:1) and, if so, for how long ("TILT for 3s", from
// sentinel_tilt_since_seconds, which Redis 7.0 adds; "TILT" without it).
func sentinelTilt(info string) (string, bool) {
	var tilt bool
	since := ""
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "sentinel_tilt":
			tilt = v == "1"
		case "sentinel_tilt_since_seconds":
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				since = fmt.Sprintf(" for %ds", n)
			}
		}
	}
	return "TILT" + since, tilt
}
