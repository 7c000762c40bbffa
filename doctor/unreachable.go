package doctor

import (
	"context"
	"errors"
	"fmt"
	"github.com/floodgate-rl/floodgate/internal/clusterslots"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/connsetup"
)

// probeTimeout bounds the reachability probe, the PING Run sends before
// any check: a Redis that accepts connections and never answers costs the
// run this long, once.
const probeTimeout = 5 * time.Second

// probeRead says what the reachability probe read and what bounded it:
// one PING (and the connection setup go-redis sends before it, HELLO and
// the like), connecting within the dial timeout a try (go-redis's
// defaults: 5 tries, 100ms apart), and each answer within
// the command timeout (config.Redis's defaults, 2s and 1s, when rc leaves
// them zero), the whole probe within probeTimeout. A Redis that accepts
// the connection and never answers fails it after the command timeout,
// not probeTimeout: a re-walk saw "bounded by 5s" on a timeout after 1s.
func probeRead(rc config.Redis) string {
	dial, cmd := rc.DialTimeout, rc.CommandTimeout
	if dial == 0 {
		dial = 2 * time.Second
	}
	if cmd == 0 {
		cmd = time.Second
	}
	return fmt.Sprintf("1 PING (and the client's connection setup), one attempt: connecting bounded by %v a try (go-redis tries up to 5 times, 100ms apart), each answer by %v, the whole probe by %v", dial, cmd, probeTimeout)
}

// authFix is the fix of a Redis that refused doctor's connection for its
// credentials (NOAUTH, WRONGPASS).
const authFix = "give doctor the user and password the instances use: --redis-password-file and --redis-username (or user:password@ in the URL), and for sentinels that require their own, --redis-sentinel-password-file and --redis-sentinel-username; then run doctor again"

// sentinelFix is the fix of a Sentinel deployment the probe could not
// reach, when the sentinels' answers diagnosed why (see sentinelDiagnosis)
// and neither sentinelsDownFix nor primaryDownFix fits.
const sentinelFix = "act on the diagnosis above (the sentinel addresses, --redis-master, the sentinels' password), check that the primary they name is up and reachable from this host, then run doctor again"

// noSentinelAnswers starts sentinelDiagnosis's diagnosis when no sentinel
// answers at all (refused, timed out, unreachable): sentinelsDownFix is
// then its fix. An outside walk met the generic sentinelFix there, which
// sent the reader to --redis-master and the primary.
const noSentinelAnswers = "no sentinel answers"

// sentinelsDownFix is the fix of a deployment none of whose sentinels
// answers.
const sentinelsDownFix = "start the sentinels (or fix their addresses: --redis-sentinel, or the hosts of the URL): while none answers, clients keep the primary they last named and a failover is not followed (serve and envoy-compat go on deciding there; floodgate_sentinel_majority is 0), and a client that starts, doctor included, cannot find the primary; then run doctor again"

// primaryDownFix is the fix of a primary that a majority of the sentinels
// names and that does not answer doctor: the sentinels may not have
// noticed yet, or be replacing it.
const primaryDownFix = "a failover may be under way (the sentinels' down-after-milliseconds, then the failover itself, up to their failover-timeout; SENTINEL MASTERS on a sentinel shows flags s_down, o_down or failover_in_progress): run doctor again in a few seconds; if the sentinels still name that primary, it has no replica they can promote, or they cannot agree (quorum): start it or a replica, check that it is reachable from this host (its address as the sentinels announce it, firewalls, TLS) and its password, then run doctor again"

// noFailoverFix is the fix of a primary, named by a majority of the
// sentinels, that does not answer, when the sentinel check judged that
// they cannot replace it: no failover is under way, nor will be.
const noFailoverFix = "no failover can happen as the sentinels stand, so do not wait for one: act on Redis/sentinel's fix, which lets them replace the primary, or start the primary they name (above) again and check that it is reachable from this host (its address as the sentinels announce it, firewalls, TLS) and its password; then run doctor again"

// primaryDownVerdict makes the reachable check say, after the sentinel
// check, whether the sentinels can replace the primary that does not
// answer: when they cannot (noFailover), its summary says so and its
// fix no longer says that a failover may be under way.
func (r *run) primaryDownVerdict() {
	if !r.noFailover {
		return
	}
	for i := range r.report.Checks {
		c := &r.report.Checks[i]
		if c.Group != GroupRedis || c.Name != "reachable" || c.Fix != primaryDownFix {
			continue
		}
		c.Summary = strings.Replace(c.Summary, "; the checks that read Redis were skipped",
			"; the sentinels cannot replace it, no failover can happen (see Redis/sentinel); the other checks that read Redis were skipped", 1)
		c.Fix = noFailoverFix
	}
}

// primaryAuthFix is the fix of a primary, named by the sentinels, that
// refused doctor's credentials: its settings are not the sentinels'.
const primaryAuthFix = "give doctor the primary's user and password (the sentinels answered; the primary they name refused these): --redis-password-file (or the password in the URL) and --redis-username, which go to the primary and its replicas only, not --redis-sentinel-password-file; then run doctor again"

// primarySilent ends sentinelDiagnosis's diagnosis when the sentinels
// name a primary and the probe failed; primaryRefuses replaces it when
// the primary refused the probe's credentials (NOAUTH, WRONGPASS).
// noMajority is in the diagnosis when only a minority of the sentinels
// answer: sentinelMinorityFix is then its fix.
const (
	noMajority          = "no majority of the sentinels answers, so a failed primary would not be replaced"
	sentinelMinorityFix = "bring back a majority of the sentinels (start those that do not answer, listed above, or SIGCONT one that was stopped), check that the primary they name is up and reachable from here, then run doctor again"

	primarySilent  = "but that primary does not: check it is up and reachable from here, and its password"
	primaryRefuses = "and that primary refuses doctor's credentials"
)

// maxclientsFix is the fix of a Redis (or sentinel) that closed doctor's
// new connection during its setup: it is up, at its maxclients limit.
const maxclientsFix = "Redis is up but refuses new connections at its maxclients limit: raise it (CONFIG SET maxclients N, and in redis.conf, within the process's open-files limit) or find who holds the connections (CLIENT LIST; connected_clients in INFO clients, rejected_connections in INFO stats), then run doctor again"

// sentinelsAtMaxclients ends sentinelDiagnosis's diagnosis when every
// sentinel closed doctor's connection during its setup.
const sentinelsAtMaxclients = "they are up, but at their maxclients limit"

// sentinelMaxclientsFix is the fix of sentinels at their maxclients
// limit.
const sentinelMaxclientsFix = "the sentinels are up but refuse new connections at their maxclients limit: raise it (maxclients in each sentinel's configuration file, then restart it) or find who holds the connections (CLIENT LIST and INFO clients on each sentinel), then run doctor again"

// connRefused reports whether err is a new connection Redis refused at
// its maxclients limit (connsetup): its "ERR max number of clients" reply
// read, or the connection closed before HELLO could be written (a broken
// pipe, as Redis closes it once it has written that reply). An EOF, a
// reset or a TLS alert during the setup is not taken for it: a TLS
// mismatch ends so (see tlsHint).
func connRefused(err error) bool {
	var serr *connsetup.Error
	return errors.As(err, &serr) && !serr.SetupTimedOut() && (serr.MaxClients() || errors.Is(err, syscall.EPIPE))
}

// closedInSetup reports whether err is a new connection Redis closed
// during its setup without a refusal read: at maxclients, or a TLS-only
// server, which another try may tell apart.
func closedInSetup(err error) bool {
	var serr *connsetup.Error
	return errors.As(err, &serr) && !serr.SetupTimedOut() && !serr.MaxClients()
}

// refusedHeadline is the start of the reachable check's summary when
// Redis closed doctor's connection during its setup: certain when its
// maxclients reply was read, likely otherwise.
func refusedHeadline(err error) string {
	var serr *connsetup.Error
	if errors.As(err, &serr) && serr.MaxClients() {
		return "Redis refuses new connections (maxclients)"
	}
	return "Redis refuses new connections (most likely maxclients: it closed doctor's connection during its setup)"
}

// unreachable records the failed reachability probe (err is the PING's
// error) as the check Redis/reachable, which fails with the diagnosis
// Run's error gave before it made a report: the sentinels' answers
// (sentinelDiagnosis), a TLS hint (tlsHint), the address. From then on
// every check that reads Redis is skipped and says so (see skipped), so
// that a Redis that is down costs the run one probe, not a timeout per
// check.
func (r *run) unreachable(ctx context.Context, err error) {
	r.down = err
	target := r.opts.Redis.String()
	r.check(GroupRedis, "reachable", func(c *Check) {
		c.Read = probeRead(r.opts.Redis) + " (Redis did not answer it, so no other Redis read was made)"
		if class := classify(r.ctxOrBackground(), err); class == errNoPerm || class == errOther {
			// It answered, with an error (NOAUTH, WRONGPASS, LOADING).
			c.Read = probeRead(r.opts.Redis) + " (Redis refused it, so no other Redis read was made)"
		}
		if errors.Is(err, clusterslots.ErrNoEndpoint) {
			// The nodes answered; their slot map named no address.
			c.Read = probeRead(r.opts.Redis) + " and CLUSTER SLOTS (the slot map names no node's address, so no other Redis read was made)"
		}
		refused := connRefused(err) && r.tlsHint(err) == ""
		if refused {
			c.Read = probeRead(r.opts.Redis) + " (Redis closed its connection during the setup, so no other Redis read was made)"
		}
		c.Status = Fail
		why, replaces, sentinelErr := r.sentinelDiagnosis(ctx)
		if st, ok := r.sentinels(); ok && len(st.Addrs) > 0 {
			c.Read = probeRead(r.opts.Redis) + ", and SENTINEL GET-MASTER-ADDR-BY-NAME on each sentinel (no other Redis read was made)"
		}
		hint := r.tlsHint(err)
		if sentinelErr != nil {
			// No sentinel answers: their errors, not the probe's (often
			// go-redis's deadline), say what TLS did. A walk got the
			// plaintext hint for an expired client certificate.
			hint = r.tlsHint(sentinelErr)
		}
		msg := err.Error()
		auth := strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS")
		if auth && why != "" && !replaces {
			// The sentinels named a primary and it answered: it
			// refused the credentials, which are the primary's.
			why = strings.Replace(why, primarySilent, primaryRefuses, 1)
		}
		switch {
		case replaces && strings.Contains(why, sentinelsAtMaxclients):
			c.Summary = fmt.Sprintf("the sentinels refuse new connections (maxclients) (%s): %s", target, why)
			c.Evidence = append(c.Evidence, "PING: "+err.Error())
		case replaces:
			c.Summary = fmt.Sprintf("cannot reach Redis (%s): %s", target, why)
			c.Evidence = append(c.Evidence, "PING: "+err.Error())
		case refused:
			// Redis is up: "cannot reach" and a fix to check that it
			// is up contradicted the maxclients diagnosis.
			c.Summary = fmt.Sprintf("%s (%s): %v", refusedHeadline(err), target, err)
			if why != "" {
				c.Evidence = append(c.Evidence, "the sentinels: "+why)
			}
		case why != "":
			c.Summary = fmt.Sprintf("cannot reach Redis (%s): %s (%v)", target, why, err)
		case hint != "":
			c.Summary = fmt.Sprintf("cannot reach Redis (%s): %v (%s)", target, err, hint)
		default:
			c.Summary = fmt.Sprintf("cannot reach Redis (%s): %v", target, err)
		}
		c.Summary += "; the checks that read Redis were skipped"
		switch class := classify(r.ctxOrBackground(), err); {
		case refused && !replaces:
			c.Fix = maxclientsFix
		case strings.Contains(why, sentinelsAtMaxclients):
			c.Fix = sentinelMaxclientsFix
		case class == errDeadline:
			c.Fix = deadlineFix
		case hint != "":
			c.Fix = hint
		case auth && why != "" && !replaces:
			c.Fix = primaryAuthFix
		case strings.Contains(why, noMajority):
			c.Fix = sentinelMinorityFix
		case strings.HasPrefix(why, noSentinelAnswers):
			c.Fix = sentinelsDownFix
		case strings.Contains(why, primarySilent):
			c.Fix = primaryDownFix
		case why != "":
			c.Fix = sentinelFix
		case strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"):
			c.Fix = authFix
		case class == errNoPerm:
			c.Fix = permissionFix()
		case class == errOther:
			c.Fix = "Redis answered doctor's PING with an error (above): fix what it says (LOADING: wait until it has loaded its data), then run doctor again"
		default:
			c.Fix = unreachableFixOf(err)
		}
	})
}

// skipped records the check group/name as not run because Redis is
// unreachable (Redis/reachable failed): what says what it would have
// read or judged. Its status is Info: the reachable check already fails
// the run.
func (r *run) skipped(group, name, what string) {
	r.check(group, name, func(c *Check) {
		c.Status = Info
		c.Summary = "skipped, Redis is unreachable (see Redis/reachable): " + what
		c.Read = "nothing (Redis is unreachable)"
	})
}
