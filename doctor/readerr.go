package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/clusterslots"
	"github.com/floodgate-rl/floodgate/internal/plural"
)

// errClass sorts a failed read by what the reader should do about it.
type errClass uint8

const (
	// errOther is any other error reply (ERR unknown command...).
	errOther errClass = iota
	// errNoPerm is a read the ACL user may not send (NOPERM, NOAUTH,
	// WRONGPASS).
	errNoPerm
	// errUnreachable is a Redis that did not answer: a timeout, a
	// refused or reset connection, an EOF.
	errUnreachable
	// errDeadline is the run's own time (Options' ctx, --timeout) over.
	errDeadline
)

// classify says what kind of failure err is; ctx is the run's context.
func classify(ctx context.Context, err error) errClass {
	msg := err.Error()
	var reply redis.Error
	switch {
	case ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		return errDeadline
	case strings.HasPrefix(msg, "NOPERM"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"):
		return errNoPerm
	case errors.As(err, &reply):
		return errOther
	}
	return errUnreachable
}

// doctorACL is the ACL rule list that lets doctor make every read it
// makes (docs/operations.md gives the same line; TestDoctorACLMatchesDocs
// compares them).
const doctorACL = "+@read +ping +info +config|get +cluster|info +cluster|slots +cluster|nodes +cluster|shards +memory|usage +latency|latest +time +evalsha +eval +script|load +asking +command"

// grantFix is the fix of reads the ACL user may not send: reads names
// them, acl is the rules that grant them. It used to offer running
// doctor as the user Floodgate uses instead, which serve's documented
// user cannot do (a walk of ACL users: NOPERM on SCAN, HLEN, LATENCY).
func grantFix(reads, acl string) string {
	return "grant doctor's ACL user these reads: " + reads + " (" + acl + ")"
}

// permissionFix is the fix of a read the ACL user may not send.
func permissionFix() string {
	return grantFix(strings.Join(ReadOnlyCommands(), ", "),
		"those a server lacks, such as CLIENT SETINFO before Redis 7.2 or SENTINEL on a data node, are not needed there; e.g. ACL SETUSER NAME "+doctorACL)
}

// probePermissionFix is the fix of a latency probe the ACL user may not
// run: its script is sent with EVALSHA, loaded with SCRIPT LOAD or sent
// with EVAL when Redis does not have it.
func probePermissionFix() string {
	return grantFix("EVALSHA, EVAL and SCRIPT LOAD of its probe script",
		"ACL SETUSER NAME +evalsha +eval +script|load; every read doctor makes: ACL SETUSER NAME "+doctorACL)
}

// unreachableFix is the fix of a Redis that stopped answering.
const unreachableFix = "Redis stopped answering (a timeout, a refused or closed connection): check that every Redis node is up, not blocked (a long command, a fork, swapping, a stopped process) and reachable from this host, then run doctor again"

// nameFix is the fix of an address that does not resolve (a
// *net.DNSError): the seed's own, or one a Cluster's nodes announce.
const nameFix = "the name does not resolve from this host: check DNS / the address; on a Cluster, the nodes announce it (cluster-announce-hostname, cluster-preferred-endpoint-type): make it resolvable here or announce IPs"

// noEndpointFix is the fix of a Cluster whose nodes announce no endpoint
// (clusterslots.ErrNoEndpoint).
const noEndpointFix = "the cluster's nodes announce no endpoint (cluster-preferred-endpoint-type unknown-endpoint), which Floodgate cannot follow: set it to ip or hostname on every node (CONFIG SET cluster-preferred-endpoint-type ip, and in redis.conf), then run doctor again"

// unreachableFixOf returns the fix of err, a failure classify calls
// errUnreachable: nameFix for a name that does not resolve, noEndpointFix
// for a Cluster that announces no endpoint, unreachableFix otherwise.
func unreachableFixOf(err error) string {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return nameFix
	case errors.Is(err, clusterslots.ErrNoEndpoint):
		return noEndpointFix
	}
	return unreachableFix
}

// deadlineFix is the fix of reads cut short by the run's deadline.
const deadlineFix = "doctor's time ran out (--timeout, default 2m) before these reads: if Redis answered slowly or not at all, check it first (see the checks above); otherwise run doctor again with a longer --timeout"

// clientCertAlerts are the TLS alerts a server sends about the client's
// certificate, as Go reports them ("remote error: tls: certificate
// required"): none presented to a server that requires one (Redis with
// tls-auth-clients yes; serve with --tls-client-ca-file, over TLS 1.3), or
// one it refused (Redis: unknown certificate authority; serve: bad
// certificate). The server speaks TLS.
var clientCertAlerts = []string{
	"certificate required", "bad certificate", "unknown certificate authority",
	"unknown certificate", "expired certificate", "revoked certificate", "unsupported certificate",
}

// clientCertAlert returns the alert of err when it is one of
// clientCertAlerts the server sent, and "" when it is not.
func clientCertAlert(err error) string {
	msg := err.Error()
	for _, a := range clientCertAlerts {
		if strings.Contains(msg, "remote error: tls: "+a) {
			return a
		}
	}
	return ""
}

// tlsHint returns a hint when err looks like a TLS mismatch: a TLS client
// whose handshake a plaintext server never answers (a timeout), or a
// plaintext client a TLS-only server closes (EOF, a reset); or a TLS
// server that refused doctor's certificate, or the lack of one; and ""
// when it does not.
func (r *run) tlsHint(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	// rediss://, or --redis-tls (or a CA file, a certificate) given.
	tlsOn := r.opts.Redis.TLS != nil || strings.HasPrefix(r.opts.Redis.URL, "rediss")
	var verr *tls.CertificateVerificationError
	var invalid x509.CertificateInvalidError
	switch {
	case tlsOn && errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		// Trusted and for the right name, but out of its dates: no
		// flag of doctor's makes it valid.
		return "the server speaks TLS, but its certificate has expired or is not yet valid (the dates in the error): renew the server's certificate (its tls-cert-file; check its dates: openssl x509 -noout -dates -in FILE), or check this host's clock if the dates look right"
	case tlsOn && errors.As(err, &verr):
		// The server speaks TLS; its certificate is what doctor refused.
		return "the server speaks TLS, but its certificate was refused: give doctor the authority that signed it (--redis-ca-file), and the name it is issued for (--redis-server-name) when it is not the address dialled"
	case tlsOn && clientCertAlert(err) == "certificate required":
		// The server's alert: it asked for a client certificate and got
		// none (a re-walk got the plaintext hint).
		return "the server speaks TLS and requires a client certificate (tls-auth-clients), which doctor did not present: give doctor a certificate and its key (--redis-cert-file, --redis-key-file) signed by an authority in the server's tls-ca-cert-file"
	case tlsOn && clientCertAlert(err) == "expired certificate":
		return "the server speaks TLS and refused doctor's client certificate as expired or not yet valid: renew it (--redis-cert-file; check its dates: openssl x509 -noout -dates -in FILE), or check the server's clock if the dates look right"
	case tlsOn && clientCertAlert(err) != "":
		return "the server speaks TLS and refused doctor's client certificate: give doctor a certificate and its key (--redis-cert-file, --redis-key-file) signed by an authority in the server's tls-ca-cert-file"
	case tlsOn && strings.Contains(msg, "remote error: tls: "):
		// Another alert (a handshake failure, a protocol version): the
		// server speaks TLS too.
		return "the server speaks TLS, but refused doctor's handshake (its alert above): check the TLS versions and ciphers it accepts (tls-protocols, tls-ciphersuites; doctor offers TLS 1.2 and 1.3)"
	case tlsOn && (errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "i/o timeout") ||
		strings.Contains(msg, "first record does not look like a TLS handshake") || strings.Contains(msg, "tls:")):
		return "doctor speaks TLS to Redis (rediss:// or --redis-tls): the server may not speak TLS; use redis:// without --redis-tls for a plaintext server"
	case !tlsOn && (errors.Is(err, io.EOF) || strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset")):
		return "the server closed the connection: is it TLS-only? use rediss:// or --redis-tls (with --redis-ca-file)"
	}
	return ""
}

// failedReads describes failed reads for a check's evidence: the count,
// and the first few commands with their errors.
func failedReads(fs []failedRead) []string {
	lines := []string{plural.Count(len(fs), "Redis read", "Redis reads") + " failed:"}
	seen := map[string]int{}
	keys := map[string][]string{} // the keys of WRONGTYPE errors, by line
	var order []string
	for _, f := range fs {
		k := f.cmd + ": " + f.err.Error()
		if seen[k] == 0 {
			order = append(order, k)
		}
		seen[k]++
		if f.key != "" && !slices.Contains(keys[k], f.key) {
			keys[k] = append(keys[k], f.key)
		}
	}
	for i, k := range order {
		if i == 3 {
			lines = append(lines, fmt.Sprintf("… %d other errors", len(order)-3))
			break
		}
		line := k
		if n := seen[k]; n > 1 {
			line += fmt.Sprintf(" (×%d)", n)
		}
		if ks := keys[k]; len(ks) > 0 {
			line += ", on " + strings.Join(firstN(ks, 3), ", ")
		}
		lines = append(lines, "  "+line)
	}
	return lines
}

// judgeFailures makes a check whose Redis reads failed say so: it adds
// the failures to the evidence, and a check that would pass (or only
// inform) on what it could read warns (an error reply: NOPERM, an unknown
// command) or fails (Redis did not answer, or the run's time ran out),
// with the fix of the worst failure.
func (r *run) judgeFailures(ctx context.Context, c *Check, fs []failedRead) {
	if len(fs) == 0 {
		return
	}
	c.Evidence = append(c.Evidence, failedReads(fs)...)
	worst := errOther
	var worstErr error
	for _, f := range fs {
		if k := classify(ctx, f.err); k > worst || worstErr == nil {
			worst, worstErr = max(worst, k), f.err
		}
	}
	if c.Status >= Warn && c.Fix != "" {
		return // the check judged the failure itself
	}
	st, fix := Warn, "read the errors above: doctor could not read everything this check needs"
	what := "a read failed (" + worstErr.Error() + ")"
	switch worst {
	case errNoPerm:
		fix = permissionFix()
		what = "Redis refused a read (" + worstErr.Error() + ")"
	case errUnreachable:
		st, fix = Fail, unreachableFixOf(worstErr)
		what = "Redis did not answer (" + worstErr.Error() + ")"
		if h := r.tlsHint(worstErr); h != "" {
			fix += "; " + h
		}
	case errDeadline:
		st, fix = Fail, deadlineFix
		what = "the run's time ran out (" + worstErr.Error() + ")"
	}
	if c.Status < st {
		if c.Summary != "" {
			c.Summary = what + ", so this is from partial data: " + c.Summary
		} else {
			c.Summary = what
		}
		c.Status = st
	}
	if c.Fix == "" {
		c.Fix = fix
	}
}
