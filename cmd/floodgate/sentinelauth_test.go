package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeSentinelPassword: behind sentinels that require a password, as
// the data nodes do, serve with --redis-sentinel-password-file is ready
// and decides in Redis. Without it (the walk's run: --redis-password-file
// only, which goes to the primary) /readyz answered 503 "all sentinels
// ... unreachable: NOAUTH" for ever, and says now which flag is missing.
func TestServeSentinelPassword(t *testing.T) {
	const pw = "serve-sentinel-pw-0123456789"
	s := redistest.StartSentinel(t)
	s.RequirePass(t, pw)
	pwFile := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := "redis-sentinel://" + strings.Join(s.SentinelAddrs, ",") + "/0?master=" + s.MasterName
	common := []string{"--redis", url, "--redis-password-file", pwFile, "--prefix", fmt.Sprintf("sentpw%d", time.Now().UnixNano())}

	svc := startService(t, append(common, "--redis-sentinel-password-file", pwFile)...)
	defer svc.stop(t)
	waitUntil(t, "readyz 200 and a decision in Redis", func() bool {
		code, _ := readyz(t, svc.url)
		c := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u"}})
		return code == 200 && c.status == 200 && !c.resp.Degraded
	})
	if strings.Contains(svc.Logs(), pw) {
		t.Fatal("the password is in the log")
	}

	bare := startService(t, common...)
	defer bare.stop(t)
	waitUntil(t, "readyz naming the missing flag", func() bool {
		code, body := readyz(t, bare.url)
		return code == 503 && strings.Contains(body, "NOAUTH") && strings.Contains(body, "--redis-sentinel-password-file")
	})
}
