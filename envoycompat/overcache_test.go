package envoycompat

import (
	"fmt"
	"testing"
	"time"
)

// TestOverCacheFullOfLiveKeys: a local cache full of live over-limit keys
// still remembers a new one, making room for a quarter of its size at
// once. Before, it dropped only expired keys and, finding none, forgot
// the new key: every further over-limit key (a flood of distinct client
// addresses over their limits) passed over the whole cache under the lock
// every request takes, and went to the store every time.
func TestOverCacheFullOfLiveKeys(t *testing.T) {
	const keys = 2 * MinLocalCacheBytes / 128
	c := newOverCache(2 * MinLocalCacheBytes)
	now := time.Unix(1_700_000_000, 0)
	for i := range keys {
		c.add(fmt.Sprint("live", i), time.Minute, now)
	}
	c.add("new", time.Minute, now)
	if !c.has("new", now) {
		t.Fatal("a new over-limit key was not remembered by a full cache")
	}
	if n := len(c.m); n > keys-keys/4+1 {
		t.Fatalf("the cache holds %d keys after making room, want at most %d: the next new key would pass over it again", n, keys-keys/4+1)
	}
	for i := range keys {
		c.add(fmt.Sprint("more", i), time.Minute, now)
		if len(c.m) > keys {
			t.Fatalf("the cache holds %d keys, over its %d", len(c.m), keys)
		}
	}
	if last := fmt.Sprint("more", keys-1); !c.has(last, now) || c.has(last, now.Add(time.Minute)) {
		t.Fatal("the last key is not remembered until its window ends")
	}
}

// TestOverCacheSmallest: any size but 0 (negative too) is at least
// MinLocalCacheBytes, as freecache makes it in theirs; 0 is no cache.
func TestOverCacheSmallest(t *testing.T) {
	if newOverCache(0) != nil {
		t.Error("size 0 made a cache")
	}
	for _, b := range []int{-5, 1, 1024} {
		if c := newOverCache(b); c == nil || c.max != MinLocalCacheBytes/128 {
			t.Errorf("size %d: %+v, want room for %d keys", b, c, MinLocalCacheBytes/128)
		}
	}
}
