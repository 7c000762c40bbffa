package shardmap

import (
	"sync"
	"sync/atomic"
	"time"
)

// Sweeper runs a store's background sweep: a timer, armed when the store
// gains an entry, that sweeps every interval and stops once the store is
// empty. So an idle store with entries left is swept until they have all
// gone, and an empty one leaves nothing running (no goroutine exists
// between sweeps either): a store using one needs no Close, though Stop
// ends the sweeps at once. memstore.Store and Map use it. A Sweeper is
// safe for concurrent use; its methods do nothing on a nil Sweeper.
type Sweeper struct {
	interval time.Duration
	sweep    func()
	held     func() int
	armed    atomic.Bool // the timer is armed or its sweep running
	// mu orders arming, ticks and Stop: a tick holds it while it sweeps,
	// so Stop returns once no sweep runs.
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// NewSweeper returns a Sweeper that, once armed, calls sweep every
// interval while held reports entries left. It returns nil, a Sweeper
// that never sweeps, when interval is not positive.
func NewSweeper(interval time.Duration, sweep func(), held func() int) *Sweeper {
	if interval <= 0 {
		return nil
	}
	return &Sweeper{interval: interval, sweep: sweep, held: held}
}

// Arm starts the timer if it is not running. A store calls it for each
// new entry; it costs an atomic load while the timer runs.
func (w *Sweeper) Arm() {
	if w == nil || w.armed.Load() || !w.armed.CompareAndSwap(false, true) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.timer = time.AfterFunc(w.interval, w.tick)
	}
}

// tick sweeps, then rearms the timer while entries are left. It holds mu
// while it sweeps but not while held counts: held may take locks a caller
// of Arm holds (memstore's Len locks each shard, and a new entry arms the
// Sweeper with its shard locked), and an Arm that found the timer stopped
// waits for mu, so counting under mu could deadlock the two.
func (w *Sweeper) tick() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.sweep()
	w.mu.Unlock()
	if w.held() == 0 {
		w.armed.Store(false)
		// An entry stored since held looked, by a writer that saw the
		// timer still armed, would otherwise wait for the next new entry.
		if w.held() == 0 || !w.armed.CompareAndSwap(false, true) {
			return
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.timer = time.AfterFunc(w.interval, w.tick)
	}
}

// Stop ends the background sweeps for good, waiting for one under way to
// finish.
func (w *Sweeper) Stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.armed.Store(true) // Arm returns at once from now on
	if w.timer != nil {
		w.timer.Stop()
	}
}

// Armed reports whether the timer is armed or its sweep running (or the
// Sweeper stopped).
func (w *Sweeper) Armed() bool { return w != nil && w.armed.Load() }
