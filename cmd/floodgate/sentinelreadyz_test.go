package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeSentinelTLSReadyzNamesNode: behind TLS-only sentinels that
// require a client certificate, serve's /readyz error names the node that
// failed and what it said, as a standalone server's does. An outside walk
// (sentineltls) got only "redis: context deadline exceeded" for an
// expired client certificate (go-redis retried the sentinels until the
// check's time ran out; only the log said why), and the same for a
// plaintext client, which got no hint to use TLS.
func TestServeSentinelTLSReadyzNamesNode(t *testing.T) {
	f := redistest.GenerateTLSExpired(t, redistest.TLSExpired{Client: true})
	f.AuthClients = true
	s := redistest.StartSentinelTLS(t, f)
	url := "redis-sentinel://" + strings.Join(s.SentinelTLSAddrs, ",") + "/0?master=" + s.MasterName
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"expired client certificate",
			[]string{"--redis", "rediss-sentinel" + strings.TrimPrefix(url, "redis-sentinel"), "--redis-ca-file", f.CA, "--redis-cert-file", f.ClientCert, "--redis-key-file", f.ClientKey},
			[]string{"expired certificate"}},
		{"plaintext to TLS-only sentinels",
			[]string{"--redis", url},
			[]string{"if it serves TLS only, connect with rediss:// or --redis-tls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := startService(t, append([]string{"--prefix", "sr"}, tc.args...)...)
			defer svc.stop(t)
			var last string
			waitUntil(t, "a /readyz error naming a sentinel and the cause", func() bool {
				code, body := readyz(t, svc.url)
				last = body
				if code != 503 || !strings.Contains(body, "sentinel 127.0.0.1:") {
					return false
				}
				for _, w := range tc.want {
					if !strings.Contains(body, w) {
						return false
					}
				}
				return true
			})
			t.Logf("/readyz: %s", last)
		})
	}
}

// TestServeSentinelReadyzNamesAuthNode: behind password-protected
// Sentinel, /readyz names the node that refused the password given: the
// primary the sentinels named, for --redis-password-file; the sentinels,
// for --redis-sentinel-password-file; and says "redis:" once. An outside
// walk (rwsentq) got a bare WRONGPASS for the primary's, and "redis:
// redis: all sentinels specified in configuration are unreachable:
// WRONGPASS ..." naming no sentinel for theirs.
func TestServeSentinelReadyzNamesAuthNode(t *testing.T) {
	s := redistest.StartSentinel(t)
	s.RequirePass(t, "right")
	dir := t.TempDir()
	right, wrong := filepath.Join(dir, "right"), filepath.Join(dir, "wrong")
	for f, pw := range map[string]string{right: "right\n", wrong: "wrong\n"} {
		if err := os.WriteFile(f, []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"--prefix", "sa", "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"wrong primary password",
			[]string{"--redis-password-file", wrong, "--redis-sentinel-password-file", right},
			[]string{"redis primary " + s.Primary.Addr + " (named by the sentinels): WRONGPASS"}},
		{"wrong sentinel password",
			[]string{"--redis-password-file", right, "--redis-sentinel-password-file", wrong},
			[]string{"sentinel " + s.SentinelAddrs[0] + ": WRONGPASS", "--redis-sentinel-password-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := startService(t, append(base, tc.args...)...)
			defer svc.stop(t)
			var last string
			waitUntil(t, "a /readyz error naming the node that refused the password", func() bool {
				code, body := readyz(t, svc.url)
				last = body
				if code != 503 || !strings.Contains(body, "WRONGPASS") {
					return false
				}
				for _, w := range tc.want {
					if !strings.Contains(body, w) {
						return false
					}
				}
				return true
			})
			if strings.Count(last, "redis: ") > 1 || strings.Contains(last, "dial tcp") {
				t.Errorf("/readyz says redis: twice: %s", last)
			}
			t.Logf("/readyz: %s", last)
		})
	}
}
