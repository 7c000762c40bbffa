package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestGRPCFlagsNeedGRPCAddr: the flags that only change the gRPC API or
// tune its listener are refused without --grpc-addr (a walk: the tuning
// ones were accepted and did nothing), as --envoy-config is, rather than ignored
// (serve used to start with no gRPC listener, reflection or headers
// silently off). The context only bounds a serve that wrongly starts.
func TestGRPCFlagsNeedGRPCAddr(t *testing.T) {
	for _, args := range [][]string{{"--grpc-reflection"}, {"--envoy-response-headers"}, {"--envoy-count-each-descriptor"},
		{"--grpc-stream-workers", "10"}, {"--grpc-max-connection-age", "5s"}, {"--grpc-max-connection-age-grace", "5s"}} {
		flag := args[0]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), &out, &errOut)
		cancel()
		if want := flag + " needs --grpc-addr"; code != 1 || !strings.Contains(errOut.String(), want) {
			t.Errorf("serve %s: exit %d, stderr %q; want 1 and %q", flag, code, errOut.String(), want)
		}
	}
}
