package rlswire

import "google.golang.org/grpc"

// The static flow-control windows of ServerOptions.
const (
	StreamWindow = 64 << 10
	ConnWindow   = 1 << 20
)

// MaxHeaderList is the largest header list (a call's metadata: the
// HTTP/2 header fields, each counted as its name and value plus 32 bytes)
// a server with ServerOptions accepts, 64 KiB as floodgate serve's HTTP
// listeners. A larger one is refused before the service sees the call:
// its stream reset (RST_STREAM FRAME_SIZE_ERROR), or its connection closed
// when one field alone is over the bound or more frames follow it; grpc-go
// clients, told the bound in the server's SETTINGS, fail such a call
// without sending it. Envoy's calls carry about 1.3 KiB, counted so (20 fields:
// pseudo-headers, grpc-timeout, x-envoy-*, x-request-id, tracing
// headers). gRPC's default is 16 MiB: in a security walk 16 calls of
// 15 MiB of metadata took a server from 79 to 214 MB of memory.
const MaxHeaderList = 64 << 10

// ServerOptions are the gRPC server options for Envoy's rate limit API,
// whose messages are a few dozen bytes, shared by floodgate serve,
// envoy-compat and the benchmarks' no-op service:
//
//   - Codec: Envoy's two messages decoded and encoded without protobuf-go's
//     reflection (the same messages and bytes), every other message by
//     gRPC's own codec; a request's descriptors decoded up to
//     maxDescriptors+1 (0: all), for the service to refuse one of more
//     than maxDescriptors (see DecodeRequestMax);
//   - static flow-control windows (StreamWindow per stream, ConnWindow per
//     connection): gRPC's dynamic windows, made for large messages on
//     links with a long round trip, send a PING for bandwidth estimation
//     on every round trip of a busy connection, which the client must
//     answer; rate limit requests never need more than the static windows;
//   - metadata bounded to MaxHeaderList bytes a call.
//
// In interleaved pairs of serve on Redis at 64 callers, the codec took
// 2.7–4.4 µs off the service's CPU per decision and the windows 0.9–1.9
// more (docs/benchmarks.md).
func ServerOptions(maxDescriptors int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(Codec{MaxDescriptors: maxDescriptors}),
		grpc.StaticStreamWindowSize(StreamWindow),
		grpc.StaticConnWindowSize(ConnWindow),
		grpc.MaxHeaderListSize(MaxHeaderList),
	}
}
