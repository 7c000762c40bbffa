package doctor

import (
	"context"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelProbeDeadlineTLSHint: the reachability probe's PING behind
// sentinels can end on go-redis's retries running out its time ("PING:
// context deadline exceeded", as an outside walk, sentineltls, saw with an
// expired client certificate), while every sentinel said why: "remote
// error: tls: expired certificate". The fix followed the PING's error
// and said the server may not speak TLS; it now follows the sentinels'.
// The sentinels are real (TLS only to clients that present a valid
// certificate); the PING's error is the walk's.
func TestSentinelProbeDeadlineTLSHint(t *testing.T) {
	f := redistest.GenerateTLSExpired(t, redistest.TLSExpired{Client: true})
	f.AuthClients = true
	s := redistest.StartSentinelTLS(t, f)
	ctx := context.Background()
	r := &run{ctx: ctx, counter: &counter{}, report: &Report{}, opts: Options{Prefix: "pd", Redis: config.Redis{
		SentinelAddrs: s.SentinelTLSAddrs, SentinelMaster: s.MasterName,
		TLS: &config.RedisTLS{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}}}}
	r.unreachable(ctx, context.DeadlineExceeded)
	if len(r.report.Checks) != 1 {
		t.Fatalf("checks %+v, want Redis/reachable alone", r.report.Checks)
	}
	c := r.report.Checks[0]
	for _, want := range []string{"expired certificate", s.SentinelTLSAddrs[0]} {
		if !strings.Contains(c.Summary, want) {
			t.Errorf("summary %q does not say %q", c.Summary, want)
		}
	}
	if want := "refused doctor's client certificate as expired or not yet valid: renew it (--redis-cert-file"; !strings.Contains(c.Fix, want) {
		t.Errorf("fix %q, want %q", c.Fix, want)
	}
}
