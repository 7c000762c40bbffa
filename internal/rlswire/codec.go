package rlswire

import (
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Codec is a gRPC codec (encoding.CodecV2) for a server of Envoy's rate
// limit service, to install with grpc.ForceServerCodecV2: it decodes a
// RateLimitRequest with DecodeRequest and encodes a RateLimitResponse with
// AppendResponse, and hands every other message (health checks,
// reflection) to gRPC's own protobuf codec. Its zero value is ready to
// use; it is safe for concurrent use.
type Codec struct {
	// MaxDescriptors bounds the descriptors of a request decoded (see
	// DecodeRequestMax): a request of more decodes to its first
	// MaxDescriptors+1, for the service to refuse. Default 0: no bound.
	MaxDescriptors int
}

// Name returns "proto": it speaks protobuf, as the codec it replaces.
func (Codec) Name() string { return protocodec.Name }

// Marshal encodes v.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rlspb.RateLimitResponse)
	if !ok || !plain(m) {
		return generic().Marshal(v)
	}
	size := responseSize(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		return mem.BufferSlice{mem.SliceBuffer(appendResponse(make([]byte, 0, size), m))}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = appendResponse((*buf)[:0], m)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes data into v.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rlspb.RateLimitRequest)
	if !ok {
		return generic().Unmarshal(data, v)
	}
	if len(data) == 1 {
		return DecodeRequestMax(data[0].ReadOnlyData(), m, c.MaxDescriptors)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return DecodeRequestMax(buf.ReadOnlyData(), m, c.MaxDescriptors)
}

// generic is gRPC's protobuf codec.
func generic() encoding.CodecV2 { return encoding.GetCodecV2(protocodec.Name) }
