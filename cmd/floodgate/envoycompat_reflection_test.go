package main

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// TestEnvoyCompatReflectionOptIn: gRPC server reflection is off by
// default, as in envoyproxy/ratelimit, which never registers it
// (grpcurl list: "server does not support the reflection API"), and as
// serve's --grpc-reflection; FLOODGATE_GRPC_REFLECTION=true turns it on.
// It was registered unconditionally (a side-by-side walk).
func TestEnvoyCompatReflectionOptIn(t *testing.T) {
	_, rt := compatRuntime(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n")
	for _, on := range []bool{false, true} {
		env := append(rt, "BACKEND_TYPE=memory")
		if on {
			env = append(env, "FLOODGATE_GRPC_REFLECTION=true")
		}
		p := startCompat(t, env...)
		services, err := listServices(t, p.grpc)
		if on {
			if err != nil {
				t.Fatalf("reflection with FLOODGATE_GRPC_REFLECTION=true: %v", err)
			}
			if !slices.Contains(services, "envoy.service.ratelimit.v3.RateLimitService") {
				t.Fatalf("reflection lists %v, want the rate limit service among them", services)
			}
		} else if status.Code(err) != codes.Unimplemented {
			t.Fatalf("reflection by default: %v (services %v), want Unimplemented", err, services)
		}
		_ = p.Stop(t)
	}
}

// listServices asks addr's reflection service for its services, as
// grpcurl list does.
func listServices(t *testing.T, addr string) ([]string, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	// Send says io.EOF when the server has already ended the stream
	// (Unimplemented comes back at once); Recv gives the status either way.
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}
