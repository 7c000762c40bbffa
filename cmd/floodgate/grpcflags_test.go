package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestGRPCFlagsNeedGRPCAddr: the flags that only change the gRPC API are
// refused without --grpc-addr, as --envoy-config is, rather than ignored
// (serve used to start with no gRPC listener, reflection or headers
// silently off). The context only bounds a serve that wrongly starts.
func TestGRPCFlagsNeedGRPCAddr(t *testing.T) {
	for _, flag := range []string{"--grpc-reflection", "--envoy-response-headers", "--envoy-count-each-descriptor"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out, errOut bytes.Buffer
		code := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", flag}, &out, &errOut)
		cancel()
		if want := flag + " needs --grpc-addr"; code != 1 || !strings.Contains(errOut.String(), want) {
			t.Errorf("serve %s: exit %d, stderr %q; want 1 and %q", flag, code, errOut.String(), want)
		}
	}
}
