//go:build linux

package main

import (
	"net"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestEnvoyCompatSharesItsPorts: a second envoy-compat starts on the
// ports a first one holds, and both answer, as two envoyproxy/ratelimit
// processes do (their listeners set SO_REUSEPORT): a start-before-stop
// restart or two hostNetwork pods on one node. It used to exit with
// "bind: address already in use".
func TestEnvoyCompatSharesItsPorts(t *testing.T) {
	rdb := redistest.Start(t)
	_, rt := compatRuntime(t, compatConfig)
	env := append(rt, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr)
	first := startCompat(t, env...)
	port := func(addr string) string {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	second := startCompat(t, append(env, "PORT="+port(first.http), "GRPC_PORT="+port(first.grpc), "DEBUG_PORT="+port(first.debug))...)
	if second.http != first.http || second.grpc != first.grpc || second.debug != first.debug {
		t.Fatalf("second instance listens on %s %s %s, want the first's %s %s %s", second.http, second.grpc, second.debug, first.http, first.grpc, first.debug)
	}
	for _, p := range []*compatProc{first, second} {
		waitFor(t, "healthcheck OK", func() bool {
			code, body := httpGet(t, "http://"+p.http+"/healthcheck")
			return code == 200 && body == "OK"
		})
	}
}
