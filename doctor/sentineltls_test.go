package doctor_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelTLSHint: behind TLS-only sentinels that require a client
// certificate, doctor's Redis/reachable gives the fix a standalone Redis
// gets for the same TLS failure, from the sentinels' own errors. An
// outside walk (sentineltls) got "the server may not speak TLS; use
// redis://" for an expired client certificate: the probe's error was
// go-redis's, not the sentinels'. A re-walk (rwsentq) then got a
// headline telling it to check that the sentinels were up and reachable,
// although they had answered with a TLS alert.
func TestSentinelTLSHint(t *testing.T) {
	f := redistest.GenerateTLSExpired(t, redistest.TLSExpired{Client: true})
	f.AuthClients = true
	other := redistest.GenerateTLS(t)
	s := redistest.StartSentinelTLS(t, f)
	for _, tc := range []struct {
		name  string
		tls   *config.RedisTLS
		hints []string
		// refused: the sentinels answered the handshake with a
		// refusal, so the headline must not call them unreachable.
		refused bool
	}{
		{"expired client certificate", &config.RedisTLS{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey},
			[]string{"expired certificate", "refused doctor's client certificate as expired", "renew it (--redis-cert-file"}, true},
		{"no client certificate", &config.RedisTLS{CAFile: f.CA},
			[]string{"certificate required", "requires a client certificate (tls-auth-clients)"}, true},
		{"client certificate of another authority", &config.RedisTLS{CAFile: f.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey},
			[]string{"unknown certificate authority", "refused doctor's client certificate"}, true},
		{"untrusted server certificate", &config.RedisTLS{CAFile: other.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey},
			[]string{"its certificate was refused: give doctor the authority that signed it (--redis-ca-file)"}, true},
		{"plaintext to TLS-only sentinels", nil,
			[]string{"is it TLS-only? use rediss:// or --redis-tls"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unreachable(t, doctor.Options{Redis: config.Redis{SentinelAddrs: s.SentinelTLSAddrs, SentinelMaster: s.MasterName, TLS: tc.tls}, Prefix: "sh"})
			for _, h := range append(tc.hints, s.SentinelTLSAddrs[0]) {
				if !strings.Contains(got, h) {
					t.Errorf("Redis/reachable says %q, want %q", got, h)
				}
			}
			if tc.refused && strings.Contains(got, "up and reachable from here") {
				t.Errorf("Redis/reachable calls the sentinels unreachable although they answered the TLS handshake: %q", got)
			}
			if fix := got[strings.LastIndex(got, "\nfix: "):]; strings.Contains(fix, "the server may not speak TLS") {
				t.Errorf("Redis/reachable's fix %q is the plaintext server's", fix)
			}
		})
	}
}
