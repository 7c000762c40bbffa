package main

import (
	"google.golang.org/grpc"

	"github.com/floodgate-rl/floodgate/internal/rlswire"
)

// grpcWireOptions are the gRPC server options serve and envoy-compat share
// for Envoy's rate limit API, whose messages are a few dozen bytes:
//
//   - rlswire's codec: Envoy's two messages decoded and encoded without
//     protobuf-go's reflection (the same messages and bytes), every other
//     message by gRPC's own codec;
//   - static flow-control windows (64 KiB per stream, 1 MiB per
//     connection): gRPC's dynamic windows, made for large messages on
//     links with a long round trip, send a PING for bandwidth estimation
//     on every round trip of a busy connection, which the client must
//     answer; rate limit requests never need more than the static windows.
//
// Together 4–6 µs less of the service's CPU per decision (serve on Redis,
// 64 callers; docs/benchmarks.md).
func grpcWireOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(rlswire.Codec{}),
		grpc.StaticStreamWindowSize(grpcStreamWindow),
		grpc.StaticConnWindowSize(grpcConnWindow),
	}
}

// The static flow-control windows of grpcWireOptions.
const (
	grpcStreamWindow = 64 << 10
	grpcConnWindow   = 1 << 20
)
