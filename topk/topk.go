// Package topk finds the heaviest hitters of a stream in bounded memory: for
// Floodgate, the identities denied most often, which cannot be metric labels
// (one series per user id or IP would explode Prometheus).
//
// A Tracker keeps a Space-Saving summary of at most Capacity keys. Every key
// whose true count exceeds total/Capacity is guaranteed to be listed, and
// each listed count is an upper bound, at most Err above the true count.
// With a Window, the Tracker forgets old traffic: it reports the current
// window plus the previous one.
package topk

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ErrInvalidOptions reports Options that New cannot use.
var ErrInvalidOptions = errors.New("topk: invalid options")

// Limits on Options.
const (
	// MaxCapacity is the largest Capacity.
	MaxCapacity = 100_000
	// MinKeyLen and MaxKeyLenLimit bound Options.MaxKeyLen.
	MinKeyLen      = 32
	MaxKeyLenLimit = 4096
)

// Item is one heavy hitter.
type Item struct {
	// Key is the identity, as given to Add (shortened, see
	// Options.MaxKeyLen), e.g. "user:42".
	Key string `json:"key"`
	// Count is an upper bound of how many times Key was added in the
	// period reported, e.g. 1520.
	Count uint64 `json:"count"`
	// Err bounds the overestimate: the true count is between Count-Err and
	// Count. Zero means Count is exact.
	Err uint64 `json:"err"`
}

// Options configures a Tracker. The zero value is ready to use.
type Options struct {
	// Capacity is how many keys are monitored at once, the memory bound.
	// Any key with more than 1/Capacity of the total is always reported.
	// Default 100; at most MaxCapacity.
	Capacity int
	// Window, when positive, makes the Tracker forget: counts go into the
	// current window, and Top reports the current and the previous window
	// (so between one and two windows of traffic). Zero counts forever,
	// until Reset.
	Window time.Duration
	// MaxKeyLen bounds the bytes kept per key: a longer key is cut and
	// suffixed with "~" and 16 hex digits of its SHA-256, so distinct long
	// keys stay distinct. Default 128; MinKeyLen..MaxKeyLenLimit.
	MaxKeyLen int
	// Now returns the current time, for windows. Default time.Now.
	Now func() time.Time
}

// Tracker counts keys and reports the heaviest. It is safe for concurrent
// use.
type Tracker struct {
	capacity  int
	window    time.Duration
	maxKeyLen int
	now       func() time.Time

	mu    sync.Mutex
	cur   *summary
	prev  *summary // nil when there is no previous window
	start time.Time
}

// New returns an empty Tracker.
func New(opts Options) (*Tracker, error) {
	if opts.Capacity < 0 || opts.Capacity > MaxCapacity {
		return nil, fmt.Errorf("%w: capacity %d out of range 0..%d", ErrInvalidOptions, opts.Capacity, MaxCapacity)
	}
	if opts.Window < 0 {
		return nil, fmt.Errorf("%w: window %v is negative", ErrInvalidOptions, opts.Window)
	}
	if opts.MaxKeyLen != 0 && (opts.MaxKeyLen < MinKeyLen || opts.MaxKeyLen > MaxKeyLenLimit) {
		return nil, fmt.Errorf("%w: max key length %d out of range %d..%d", ErrInvalidOptions, opts.MaxKeyLen, MinKeyLen, MaxKeyLenLimit)
	}
	if opts.Capacity == 0 {
		opts.Capacity = 100
	}
	if opts.MaxKeyLen == 0 {
		opts.MaxKeyLen = 128
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Tracker{
		capacity:  opts.Capacity,
		window:    opts.Window,
		maxKeyLen: opts.MaxKeyLen,
		now:       opts.Now,
		cur:       newSummary(opts.Capacity),
		start:     opts.Now(),
	}, nil
}

// Add counts n occurrences of key. A zero n is ignored.
func (t *Tracker) Add(key string, n uint64) {
	if n == 0 {
		return
	}
	key = t.shorten(key)
	t.mu.Lock()
	t.rotate()
	t.cur.add(key, n)
	t.mu.Unlock()
}

// Top returns up to n heavy hitters, largest count first (ties by key).
// n <= 0 or above the capacity returns every monitored key.
func (t *Tracker) Top(n int) []Item {
	t.mu.Lock()
	t.rotate()
	items := t.merged()
	t.mu.Unlock()
	sortItems(items)
	if n > 0 && n < len(items) {
		items = items[:n]
	}
	return items
}

// Total returns how many occurrences were added in the period Top reports.
func (t *Tracker) Total() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotate()
	if t.prev != nil {
		return satAdd(t.cur.total, t.prev.total)
	}
	return t.cur.total
}

// Reset forgets everything.
func (t *Tracker) Reset() {
	t.mu.Lock()
	t.cur, t.prev, t.start = newSummary(t.capacity), nil, t.now()
	t.mu.Unlock()
}

// rotate starts a new window when the current one is over. t.mu is held.
func (t *Tracker) rotate() {
	if t.window <= 0 {
		return
	}
	elapsed := t.now().Sub(t.start)
	if elapsed < t.window {
		return
	}
	if elapsed < 2*t.window {
		t.prev = t.cur
	} else {
		t.prev = nil // idle for more than a window: the last one is stale too
	}
	t.cur = newSummary(t.capacity)
	t.start = t.start.Add(elapsed / t.window * t.window)
}

// merged combines the current and previous summaries. A key missing from
// one of them may still have been counted there, up to that summary's
// floor, which is added to both its count and its error. t.mu is held.
func (t *Tracker) merged() []Item {
	if t.prev == nil {
		items := make([]Item, 0, len(t.cur.heap))
		for _, c := range t.cur.heap {
			items = append(items, Item{Key: c.key, Count: c.count, Err: c.err})
		}
		return items
	}
	seen := make(map[string]bool, len(t.cur.heap)+len(t.prev.heap))
	items := make([]Item, 0, len(seen))
	for _, s := range []*summary{t.cur, t.prev} {
		for _, c := range s.heap {
			if seen[c.key] {
				continue
			}
			seen[c.key] = true
			c1, e1 := t.cur.lookup(c.key)
			c2, e2 := t.prev.lookup(c.key)
			items = append(items, Item{Key: c.key, Count: satAdd(c1, c2), Err: satAdd(e1, e2)})
		}
	}
	return items
}

// shorten bounds a key's length, keeping distinct keys distinct.
func (t *Tracker) shorten(key string) string {
	if len(key) <= t.maxKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	head := strings.ToValidUTF8(key[:t.maxKeyLen-17], "")
	return head + "~" + hex.EncodeToString(sum[:8])
}
