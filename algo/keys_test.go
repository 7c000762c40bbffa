package algo_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/memstore"
)

func TestHashTag(t *testing.T) {
	tests := []struct{ key, want string }{
		{"fg:api:sw:{ruser}", "ruser"},
		{"plain", "plain"},
		{"a{}b{c}", "a{}b{c}"},
		{"a{b", "a{b"},
		{"{x}{y}", "x"},
	}
	for _, tt := range tests {
		if got := algo.HashTag(tt.key); got != tt.want {
			t.Errorf("HashTag(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

// TestKeyAtIsTheLimitersKey: KeyAt builds the key a Limiter gives its
// store, for every algorithm, including a Quota policy's period key.
func TestKeyAtIsTheLimitersKey(t *testing.T) {
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	l, err := floodgate.New(mem, floodgate.Options{Prefix: "app", Clock: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	q, err := floodgate.NewQuota("billing", 100, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := floodgate.NewSlidingWindow("api", 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		p    floodgate.Policy
		id   string
		want string
	}{
		{q, "user42", "app:billing:qt:{ruser42}:m2026-12"},
		{sw, "user42", "app:api:sw:{ruser42}"},
		{sw, "a:b", floodgate.Key("app", sw, "a:b")},
	} {
		got := algo.KeyAt("app", tt.p, tt.id, at.UnixMicro())
		if got != tt.want || got != l.Key(tt.p, tt.id) {
			t.Errorf("KeyAt(%s, %q) = %q; Limiter.Key = %q; want %q", tt.p.Name, tt.id, got, l.Key(tt.p, tt.id), tt.want)
		}
	}
	// The key the store is handed is the same one.
	rec := &recordingStore{Store: mem}
	l2, err := floodgate.New(rec, floodgate.Options{Prefix: "app", Clock: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Allow(context.Background(), q, "user42"); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.key, algo.KeyAt("app", q, "user42", at.UnixMicro()); got != want {
		t.Errorf("store got key %q, want %q", got, want)
	}
}

type recordingStore struct {
	floodgate.Store
	key string
}

func (s *recordingStore) Decide(ctx context.Context, now int64, layers []floodgate.Layer, out []floodgate.Result) error {
	s.key = layers[0].Key
	return s.Store.Decide(ctx, now, layers, out)
}
