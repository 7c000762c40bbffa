package rlswire

import "google.golang.org/grpc"

// The static flow-control windows of ServerOptions.
const (
	StreamWindow = 64 << 10
	ConnWindow   = 1 << 20
)

// ServerOptions are the gRPC server options for Envoy's rate limit API,
// whose messages are a few dozen bytes, shared by floodgate serve,
// envoy-compat and the benchmarks' no-op service:
//
//   - Codec: Envoy's two messages decoded and encoded without protobuf-go's
//     reflection (the same messages and bytes), every other message by
//     gRPC's own codec;
//   - static flow-control windows (StreamWindow per stream, ConnWindow per
//     connection): gRPC's dynamic windows, made for large messages on
//     links with a long round trip, send a PING for bandwidth estimation
//     on every round trip of a busy connection, which the client must
//     answer; rate limit requests never need more than the static windows.
//
// In interleaved pairs of serve on Redis at 64 callers, the codec took
// 2.7–4.4 µs off the service's CPU per decision and the windows 0.9–1.9
// more (docs/benchmarks.md).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(Codec{}),
		grpc.StaticStreamWindowSize(StreamWindow),
		grpc.StaticConnWindowSize(ConnWindow),
	}
}
