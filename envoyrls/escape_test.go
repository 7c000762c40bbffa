package envoyrls

import (
	"context"
	"fmt"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
)

// The tests of this file: a request whose descriptors a client shapes
// (an entry built from a header, a cost) is decided, never refused, so
// that it cannot escape the request's other limits (the per-IP one) under
// Envoy's failure_mode_deny: false. Each runs on memstore and on a real
// redis-server.

// escapeConfig limits each client IP to 3 a minute, each user to 2.
const escapeConfig = `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// rigs returns a memstore rig and a Redis rig serving yaml under opts.
func rigs(t *testing.T, yaml string, opts Options) map[string]*rig {
	t.Helper()
	rr, _ := newRedisRig(t, yaml, opts)
	return map[string]*rig{"memory": newMemRig(t, yaml, opts), "redis": rr}
}

// ip is the per-IP descriptor every request of these tests carries.
func ip() *ratelimitv3.RateLimitDescriptor { return desc("remote_address=192.0.2.7") }

// descCost returns d with its own hits_addend.
func descCost(d *ratelimitv3.RateLimitDescriptor, hits uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// deepDesc returns a descriptor of n entries.
func deepDesc(n int) *ratelimitv3.RateLimitDescriptor {
	d := desc()
	for range n {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: "v"})
	}
	return d
}

// TestClientShapedEntriesAreCounted: an entry with an empty key, a
// descriptor deeper than any configured one, many descriptors that match
// nothing: each is answered OK with no limit, and the per-IP descriptor
// of the same request is counted (3 pass, the 4th is OVER_LIMIT).
func TestClientShapedEntriesAreCounted(t *testing.T) {
	unmatched := make([]*ratelimitv3.RateLimitDescriptor, 0, 3*MaxDescriptors)
	for range 3 * MaxDescriptors {
		unmatched = append(unmatched, desc("header=x"))
	}
	tests := []struct {
		name  string
		other []*ratelimitv3.RateLimitDescriptor
	}{
		{"empty key", []*ratelimitv3.RateLimitDescriptor{desc("=v")}},
		{"empty key deeper", []*ratelimitv3.RateLimitDescriptor{desc("remote_address=192.0.2.7", "=v")}},
		{"deeper than MaxDepth", []*ratelimitv3.RateLimitDescriptor{deepDesc(MaxDepth + 1)}},
		{"far deeper", []*ratelimitv3.RateLimitDescriptor{deepDesc(1000)}},
		{"many unmatched descriptors", unmatched},
	}
	for name, r := range rigs(t, escapeConfig, Options{}) {
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				// Each case its own IP: the rig is shared.
				ipd := desc("remote_address=" + tt.name)
				for i, want := range []rlspb.RateLimitResponse_Code{ok, ok, ok, over} {
					resp := r.call(t, request("api", append([]*ratelimitv3.RateLimitDescriptor{ipd}, tt.other...)...))
					if resp.GetOverallCode() != want {
						t.Fatalf("request %d: overall %v, want %v", i, resp.GetOverallCode(), want)
					}
					wantStatus(t, "ip", resp.GetStatuses()[0], want, uint32(max(2-i, 0)), 3)
					for j, st := range resp.GetStatuses()[1:] {
						wantStatus(t, fmt.Sprintf("client-shaped descriptor %d", j+1), st, ok, 0, 0)
					}
				}
			})
		}
	}
}

// TestLongValuesAreCounted: keys and values longer than the old 4096-byte
// cap (up to what the message limit lets through) are decided: the per-IP
// descriptor beside them is counted, a long user value is a counter of its
// own (hashed into its storage key: Redis keys stay short), and two long
// values differing in their last byte are two counters.
func TestLongValuesAreCounted(t *testing.T) {
	long := strings.Repeat("u", 64<<10)
	for name, r := range rigs(t, escapeConfig, Options{}) {
		t.Run(name, func(t *testing.T) {
			// The third is denied by the user's limit; the IP layer, which
			// would have admitted it, consumed nothing (all or nothing).
			for i, want := range []struct {
				code         rlspb.RateLimitResponse_Code
				ip, userLeft uint32
			}{{ok, 2, 1}, {ok, 1, 0}, {over, 1, 0}} {
				resp := r.call(t, request("api", ip(), desc("user="+long+"a"), desc(long+"=x")))
				if resp.GetOverallCode() != want.code {
					t.Fatalf("request %d: overall %v, want %v", i, resp.GetOverallCode(), want.code)
				}
				wantStatus(t, "ip", resp.GetStatuses()[0], ok, want.ip, 3)
				wantStatus(t, "long user", resp.GetStatuses()[1], want.code, want.userLeft, 2)
				wantStatus(t, "long key", resp.GetStatuses()[2], ok, 0, 0)
			}
			resp := r.call(t, request("api", desc("user="+long+"b")))
			wantStatus(t, "other long user", resp.GetStatuses()[0], ok, 1, 2)
		})
	}
}

// TestLongValuesHashedInRedis: a 64 KiB value gives a Redis key of
// bounded length.
func TestLongValuesHashedInRedis(t *testing.T) {
	r, srv := newRedisRig(t, escapeConfig, Options{})
	r.call(t, request("api", desc("user="+strings.Repeat("v", 64<<10))))
	keys, err := srv.Client(t).Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no key written")
	}
	for _, k := range keys {
		if len(k) > 256 {
			t.Errorf("key of %d bytes: %.80q...", len(k), k)
		}
	}
}

// TestCostAboveMaximumIsOverLimit: a hits_addend above MaxHitsAddend
// makes its descriptor OVER_LIMIT, consuming nothing, instead of refusing
// the call; the request's other descriptors are decided as usual (all or
// nothing: denied with it; one by one: counted; shadow: not denying).
func TestCostAboveMaximumIsOverLimit(t *testing.T) {
	const maxHits = 1000
	type step struct {
		name    string
		req     *rlspb.RateLimitRequest
		overall rlspb.RateLimitResponse_Code
		codes   []rlspb.RateLimitResponse_Code
		remain  []uint32
	}
	reqHits := func(hits uint32, descs ...*ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitRequest {
		req := request("api", descs...)
		req.HitsAddend = hits
		return req
	}
	tests := []struct {
		name  string
		opts  Options
		steps []step
	}{
		{"all or nothing", Options{MaxHitsAddend: maxHits}, []step{
			{"descriptor cost", request("api", ip(), descCost(desc("user=a"), maxHits+1)), over, []rlspb.RateLimitResponse_Code{ok, over}, []uint32{3, 2}},
			{"huge descriptor cost", request("api", ip(), descCost(desc("user=a"), 1<<63)), over, []rlspb.RateLimitResponse_Code{ok, over}, []uint32{3, 2}},
			{"request cost", reqHits(maxHits+1, ip(), descCost(desc("user=a"), 1)), over, []rlspb.RateLimitResponse_Code{over, ok}, []uint32{3, 2}},
			{"shadow", request("api", ip(), descCost(desc("shadow=s"), maxHits+1)), ok, []rlspb.RateLimitResponse_Code{ok, over}, []uint32{2, 5}},
			{"then", request("api", ip(), desc("user=a")), ok, []rlspb.RateLimitResponse_Code{ok, ok}, []uint32{1, 1}},
		}},
		{"count each", Options{MaxHitsAddend: maxHits, CountEachDescriptor: true}, []step{
			{"descriptor cost", request("api", ip(), descCost(desc("user=a"), maxHits+1)), over, []rlspb.RateLimitResponse_Code{ok, over}, []uint32{2, 2}},
			{"request cost", reqHits(maxHits+1, ip(), descCost(desc("user=a"), 1)), over, []rlspb.RateLimitResponse_Code{over, ok}, []uint32{2, 1}},
		}},
		// MaxRequestDescriptors repeats of DefaultMaxHitsAddend stay
		// under MaxCost: the largest MaxHitsAddend takes 17 past it.
		{"costs of one counter past MaxCost", Options{MaxHitsAddend: floodgate.MaxCost / MaxDescriptors}, []step{
			{"255 × 2^36", request("api", append([]*ratelimitv3.RateLimitDescriptor{ip()}, repeat(MaxRequestDescriptors-1, func() *ratelimitv3.RateLimitDescriptor {
				return descCost(desc("user=a"), floodgate.MaxCost/MaxDescriptors)
			})...)...), over, append([]rlspb.RateLimitResponse_Code{ok}, repeat(MaxRequestDescriptors-1, func() rlspb.RateLimitResponse_Code { return over })...), append([]uint32{3}, repeat(MaxRequestDescriptors-1, func() uint32 { return 2 })...)},
		}},
	}
	for _, tt := range tests {
		for name, r := range rigs(t, escapeConfig, tt.opts) {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				for _, s := range tt.steps {
					resp := r.call(t, s.req)
					if resp.GetOverallCode() != s.overall {
						t.Errorf("%s: overall %v, want %v", s.name, resp.GetOverallCode(), s.overall)
					}
					for i, st := range resp.GetStatuses() {
						if st.GetCode() != s.codes[i] || st.GetLimitRemaining() != s.remain[i] {
							t.Fatalf("%s: status %d: %v remaining %d, want %v remaining %d", s.name, i, st.GetCode(), st.GetLimitRemaining(), s.codes[i], s.remain[i])
						}
					}
				}
			})
		}
	}
}

// TestCountEachDecidesDuplicatesInOrder: with CountEachDescriptor, three
// descriptors naming one counter of limit 2 are decided one after the
// other, as theirs are: OK (1 left), OK (0 left), OVER_LIMIT, and the
// counter holds 2. All-or-nothing adds them into one layer of cost 3 and
// denies the three.
func TestCountEachDecidesDuplicatesInOrder(t *testing.T) {
	three := func() *rlspb.RateLimitRequest {
		return request("api", desc("user=dup"), desc("user=dup"), desc("user=dup"))
	}
	for name, r := range rigs(t, escapeConfig, Options{CountEachDescriptor: true}) {
		t.Run("count each/"+name, func(t *testing.T) {
			resp := r.call(t, three())
			if resp.GetOverallCode() != over {
				t.Errorf("overall %v, want OVER_LIMIT", resp.GetOverallCode())
			}
			st := resp.GetStatuses()
			wantStatus(t, "first", st[0], ok, 1, 2)
			wantStatus(t, "second", st[1], ok, 0, 2)
			wantStatus(t, "third", st[2], over, 0, 2)
			wantStatus(t, "after", r.call(t, request("api", desc("user=dup"))).GetStatuses()[0], over, 0, 2)
			// One decision each: more than MaxDescriptors limited ones
			// would be as many round trips.
			_, err := r.client.ShouldRateLimit(context.Background(), request("api", repeat(MaxDescriptors+1, func() *ratelimitv3.RateLimitDescriptor { return desc("user=many") })...))
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "more than 16 descriptors with a limit") {
				t.Errorf("%d limited descriptors: %v, want INVALID_ARGUMENT", MaxDescriptors+1, err)
			}
		})
	}
	for name, r := range rigs(t, escapeConfig, Options{}) {
		t.Run("all or nothing/"+name, func(t *testing.T) {
			resp := r.call(t, three())
			for i, st := range resp.GetStatuses() {
				wantStatus(t, fmt.Sprintf("duplicate %d", i), st, over, 2, 2)
			}
			wantStatus(t, "after", r.call(t, request("api", desc("user=dup"))).GetStatuses()[0], ok, 1, 2)
		})
	}
}

// repeat returns n results of f.
func repeat[T any](n int, f func() T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = f()
	}
	return s
}
