package doctor

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestWindowCount reads the count of fixed and sliding window states as
// the Redis store writes them, in both of its state formats, and rejects
// what is not such a state.
func TestWindowCount(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixMicro()
	for _, format := range []redisstore.StateFormat{redisstore.BinaryState, redisstore.TextState} {
		store, err := redisstore.New(client, redisstore.Options{StateFormat: format})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
			p := floodgate.Policy{Name: "wc", Algorithm: a, Limit: 100, Window: time.Minute}
			key := "{wc}:" + format.String() + ":" + a.String()
			out := make([]floodgate.Result, 1)
			for _, cost := range []int64{3, 4} {
				if err := store.Decide(ctx, now, []floodgate.Layer{{Policy: p, Key: key, Cost: cost}}, out); err != nil {
					t.Fatal(err)
				}
			}
			v, err := client.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := windowCount(v); !ok || got != 7 {
				t.Errorf("%s, %s: windowCount(%q) = %d, %v, want 7, true", format, a, v, got, ok)
			}
		}
	}
	for _, v := range []string{"", "x", "12", "\x01short", "\x03" + string(make([]byte, 23)), "\x05" + string(make([]byte, 16))} {
		if got, ok := windowCount(v); ok {
			t.Errorf("windowCount(%q) = %d, true, want false", v, got)
		}
	}
}
