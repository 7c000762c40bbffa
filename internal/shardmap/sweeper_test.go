package shardmap

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSweeperArmWhileCounting: a store arms its Sweeper with a shard
// locked (memstore, a new entry), and its held count locks every shard
// (memstore's Len). An Arm arriving once a tick found the store empty,
// while the tick counts again, must not wait for the tick: the tick used
// to count holding the mutex Arm takes, so the tick waited for the
// shard's lock and the writer for the tick, for good.
func TestSweeperArmWhileCounting(t *testing.T) {
	var shard sync.Mutex // the lock held counts under and Arm is called with
	var counts atomic.Int32
	recount := make(chan struct{})
	w := NewSweeper(time.Millisecond, func() {}, func() int {
		if counts.Add(1) == 2 {
			// The tick found the store empty and disarmed; count again
			// under the shard's lock, as memstore's Len does.
			close(recount)
			shard.Lock()
			defer shard.Unlock()
			return 1 // the writer's entry
		}
		return 0
	})
	armed := make(chan struct{})
	go func() {
		defer close(armed)
		shard.Lock()
		defer shard.Unlock()
		w.Arm() // the store's first entry
		<-recount
		w.Arm() // a new entry, with its shard locked
	}()
	// The deadline only bounds a failing (deadlocked) run.
	// (Stop, which takes the mutex too, would wait for good as well.)
	select {
	case <-armed:
		w.Stop()
	case <-time.After(30 * time.Second):
		t.Fatal("Arm, called with the shard locked, still waits 30 s on: the tick counts holding the Sweeper's mutex")
	}
}
