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
	c := newOverCache(100 * 128) // 100 keys
	now := time.Unix(1_700_000_000, 0)
	for i := range 100 {
		c.add(fmt.Sprint("live", i), time.Minute, now)
	}
	c.add("new", time.Minute, now)
	if !c.has("new", now) {
		t.Fatal("a new over-limit key was not remembered by a full cache")
	}
	if n := len(c.m); n > 100-25+1 {
		t.Fatalf("the cache holds %d keys after making room, want at most %d: the next new key would pass over it again", n, 100-25+1)
	}
	for i := range 100 {
		c.add(fmt.Sprint("more", i), time.Minute, now)
		if len(c.m) > 100 {
			t.Fatalf("the cache holds %d keys, over its 100", len(c.m))
		}
	}
	if !c.has("more99", now) || c.has("more99", now.Add(time.Minute)) {
		t.Fatal("the last key is not remembered until its window ends")
	}
}
