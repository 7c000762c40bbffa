package denycache

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// BenchmarkFloodDeniedKey measures one denied request of a flood on one
// key that is already over its limit: straight to the store, and through
// the cache. Run with: go test -run '^$' -bench FloodDeniedKey ./denycache
func BenchmarkFloodDeniedKey(b *testing.B) {
	stores := []struct {
		name string
		new  func(b *testing.B) floodgate.Store
	}{
		{"memstore", func(b *testing.B) floodgate.Store { return newMem(b) }},
		{"redis", func(b *testing.B) floodgate.Store {
			s, err := redisstore.New(redistest.Start(b).Client(b), redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	p := floodgate.Policy{Name: "api", Algorithm: floodgate.SlidingWindow, Limit: 10, Window: time.Hour}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			store := st.new(b)
			for _, withCache := range []bool{false, true} {
				name, s := "plain", store
				if withCache {
					c, err := New(store, Options{MaxTTL: time.Hour})
					if err != nil {
						b.Fatal(err)
					}
					name, s = "cached", c
				}
				b.Run(name, func(b *testing.B) {
					l, err := floodgate.New(s, floodgate.Options{Prefix: "bench-" + name})
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					for range 11 {
						if _, err := l.AllowAt(ctx, t0, p, "bot", 1); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportAllocs()
					for b.Loop() {
						r, err := l.AllowAt(ctx, t0, p, "bot", 1)
						if err != nil || r.Allowed {
							b.Fatalf("%+v, %v", r, err)
						}
					}
				})
			}
		})
	}
}
