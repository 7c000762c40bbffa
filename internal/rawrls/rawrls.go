// Package rawrls writes requests of Envoy's rate limit service
// (envoy.service.ratelimit.v3 ShouldRateLimit) byte by byte, their strings
// as they are, and sends them with a codec that passes bytes through: the
// requests Envoy's C++ protobuf sends with strings that are not UTF-8,
// which protobuf-go will not marshal. Tests use it.
package rawrls

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Method is the full gRPC method name of ShouldRateLimit.
const Method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// Request returns the wire format of a request of domain with one
// descriptor of entries (key, value, key, value...; an odd last one is
// dropped), its strings written as they are, UTF-8 or not.
func Request(domain string, entries ...string) []byte {
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	var desc []byte
	for i := 0; i+1 < len(entries); i += 2 {
		desc = protowire.AppendBytes(protowire.AppendTag(desc, 1, protowire.BytesType), str(str(nil, 1, entries[i]), 2, entries[i+1]))
	}
	return protowire.AppendBytes(protowire.AppendTag(str(nil, 1, domain), 2, protowire.BytesType), desc)
}

// Codec is a gRPC codec (give it with grpc.ForceCodecV2) whose messages
// are *[]byte, sent and received as they are.
type Codec struct{}

// Name is the name of the codec it stands in for, so that the content
// type is application/grpc+proto.
func (Codec) Name() string { return "proto" }

// Marshal returns the bytes *v holds (v is a *[]byte).
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

// Unmarshal sets *v (a *[]byte) to the message's bytes.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
