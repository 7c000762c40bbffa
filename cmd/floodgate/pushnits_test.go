package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestConfigPushRefusesSubMillisecondWaitTimeout: --wait-timeout above 0
// but below 1ms is refused at once, saying why. Redis counts WAIT's
// timeout in milliseconds: an outside walk (rwfault) saw 1ns, 999us and
// 500us go out as WAIT 1 0, which waits for ever, and push fail ~10 s
// later with "WAIT 1: read tcp ...: i/o timeout".
func TestConfigPushRefusesSubMillisecondWaitTimeout(t *testing.T) {
	rs := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(file, []byte(failoverDoc("1")), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("pnwt%d", time.Now().UnixNano())
	for _, d := range []string{"1ns", "999us", "500us"} {
		start := time.Now()
		code, out, errOut := cli("config", "push", file, "--redis", "redis://"+rs.Addr, "--prefix", prefix, "--wait-replicas", "1", "--wait-timeout", d)
		took := time.Since(start)
		if code == 0 || !strings.Contains(errOut, "below 1ms") || took > 2*time.Second {
			t.Errorf("--wait-timeout %s: exit %d after %v\n%s%s\nwant it refused at once, saying below 1ms", d, code, took, out, errOut)
		}
	}
	if n, err := rs.Client(t).Exists(t.Context(), prefix+":config").Result(); err != nil || n != 0 {
		t.Errorf("a refused push stored the document (EXISTS %d, %v)", n, err)
	}
}

// TestConfigPushHelpSaysInstancesMayApply: config push --help says that
// a push not confirmed durable is stored on the primary, where
// instances polling may still apply it, and that pushing again is how it
// is confirmed (it said only "does not announce it").
func TestConfigPushHelpSaysInstancesMayApply(t *testing.T) {
	code, out, errOut := cli("config", "push", "--help")
	if code != 0 {
		t.Fatalf("config push --help: exit %d %s", code, errOut)
	}
	text := strings.ToLower(strings.Join(strings.Fields(out), " "))
	for _, want := range []string{
		"stored on the primary",
		"instances polling redis may still apply it at their next poll",
		"run the push again to confirm it",
		"fewer replicas online than --wait-replicas",
		"give the primary, or the sentinels with --redis-sentinel",
		"1ms",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("config push --help lacks %q:\n%s", want, out)
		}
	}
}
