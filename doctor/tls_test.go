package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestTLSMismatchHint: plaintext to a TLS-only port failed with a bare
// "EOF", TLS to a plaintext port with "context deadline exceeded" after
// 5s; neither mentioned TLS. Both now say what to try.
func TestTLSMismatchHint(t *testing.T) {
	f := redistest.GenerateTLS(t)
	srv := redistest.StartTLS(t, f)
	for _, tc := range []struct {
		name  string
		redis config.Redis
		hint  string
	}{
		{"plaintext to TLS", config.Redis{URL: "redis://" + srv.TLSAddr}, "is it TLS-only? use rediss:// or --redis-tls"},
		{"TLS to plaintext", config.Redis{URL: "redis://" + srv.Addr, TLS: &config.RedisTLS{CAFile: f.CA}}, "the server may not speak TLS"},
		// The server speaks TLS; its certificate is not trusted: the fix
		// is the CA file, not plaintext (a re-walk got the plaintext hint).
		{"untrusted certificate", config.Redis{URL: "rediss://" + srv.TLSAddr}, "its certificate was refused: give doctor the authority that signed it (--redis-ca-file)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := doctor.Run(ctx, doctor.Options{Redis: tc.redis, Prefix: "tm"})
			if err == nil || !strings.Contains(err.Error(), tc.hint) {
				t.Fatalf("error %v, want the hint %q", err, tc.hint)
			}
		})
	}
}
