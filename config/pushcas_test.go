package config

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestForcedOverwriteIsCompareAndSwap: a forced push replacing what
// cannot be read as a document (a hash, a value over MaxSize) fails if
// another push stores a document meanwhile, as any push does (it used a
// plain SET, and silently overwrote the other push).
func TestForcedOverwriteIsCompareAndSwap(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	doc := func(v string) []byte {
		return fmt.Appendf(nil, "version: %q\npolicies:\n  - name: api\n    layers:\n      - {name: u, algorithm: sliding_window, limit: 5, window: 1m, dimension: user}\n", v)
	}
	for name, store := range map[string]func(Keys) error{
		"hash": func(k Keys) error { return client.HSet(ctx, k.Config, "a", "b").Err() },
		"oversized": func(k Keys) error {
			return client.Set(ctx, k.Config, make([]byte, MaxSize+1), 0).Err()
		},
	} {
		t.Run(name, func(t *testing.T) {
			keys, _ := KeysFor(fmt.Sprintf("cas%s%d", name, time.Now().UnixNano()))
			if err := store(keys); err != nil {
				t.Fatal(err)
			}
			var inner error
			race := func() {
				_, inner = PublishWith(ctx, client, keys, doc("7"), PublishOptions{Force: true})
			}
			_, err := PublishWith(ctx, client, keys, doc("3"), PublishOptions{Force: true, beforeStore: race})
			if inner != nil {
				t.Fatalf("the push in between: %v", inner)
			}
			if !errors.Is(err, ErrVersionConflict) {
				t.Fatalf("forced push over a %s another push replaced meanwhile: %v, want ErrVersionConflict", name, err)
			}
			got, gerr := client.Get(ctx, keys.Config).Bytes()
			if gerr != nil || string(got) != string(doc("7")) {
				t.Fatalf("Redis holds %.60q (%v), want version 7, the push in between", got, gerr)
			}
			// Unraced, the forced push goes through.
			if err := client.Del(ctx, keys.Config).Err(); err != nil {
				t.Fatal(err)
			}
			if err := store(keys); err != nil {
				t.Fatal(err)
			}
			if _, err := PublishWith(ctx, client, keys, doc("3"), PublishOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
