// Package ratelog logs each kind of message at most once per interval, so
// that a failure met by every request (a store outage, say) writes one
// line per interval instead of one per request. The first message of a
// kind is always written; the next one written says how many were
// suppressed in between.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Log is a rate-limited logger. Safe for concurrent use. A message held
// back costs no lock: a map read and two atomic operations, so that
// every request of an outage can ask (serve's degraded decisions).
type Log struct {
	log   *slog.Logger
	every time.Duration
	start time.Time // the monotonic origin of kind.last

	kinds atomic.Pointer[map[string]*kind] // copied on write
	mu    sync.Mutex                       // serializes writers of kinds
}

// kind is the state of one kind of message.
type kind struct {
	last atomic.Int64 // when one was last written, ns since Log.start; never before the first
	held atomic.Int64 // how many were held back since
}

// never is kind.last before any message of the kind was written.
const never = -1 << 63

// New returns a Log writing to log at most one message of each kind per
// every.
func New(log *slog.Logger, every time.Duration) *Log {
	l := &Log{log: log, every: every, start: time.Now()}
	l.kinds.Store(&map[string]*kind{})
	return l
}

// Warn logs msg at warn level under kind (see Log).
func (l *Log) Warn(kind, msg string, args ...any) {
	l.Log(context.Background(), slog.LevelWarn, kind, msg, args...)
}

// Error logs msg at error level under kind (see Log).
func (l *Log) Error(ctx context.Context, kind, msg string, args ...any) {
	l.Log(ctx, slog.LevelError, kind, msg, args...)
}

// Log logs msg at level under kind, unless a message of that kind was
// logged less than the interval ago (then it is only counted); the next
// one logged carries a "suppressed" attribute with that count. kind must
// come from a closed set (each kind is remembered for good).
func (l *Log) Log(ctx context.Context, level slog.Level, kind, msg string, args ...any) {
	if !l.log.Enabled(ctx, level) {
		return
	}
	suppressed, due := l.Due(kind)
	if !due {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	l.log.Log(ctx, level, msg, args...)
}

// Due reports whether a message of kind is to be written now (see Log):
// if so, it returns true and how many messages of that kind were
// suppressed since the last one, and the caller writes it, with that
// count if above zero; otherwise it counts one more suppressed and
// returns false. It lets a caller skip building a message's arguments,
// an allocation, when the message would be suppressed (serve's log of
// degraded decisions, met by every request during an outage). kind must
// come from a closed set, as for Log.
func (l *Log) Due(name string) (suppressed int, due bool) {
	k := l.kind(name)
	now := int64(time.Since(l.start))
	for {
		last := k.last.Load()
		if last != never && now-last < int64(l.every) {
			k.held.Add(1)
			return 0, false
		}
		if k.last.CompareAndSwap(last, now) {
			return int(k.held.Swap(0)), true
		}
		// Another caller wrote one of this kind meanwhile: look again.
	}
}

// kind returns the state of the kind named, adding it the first time.
func (l *Log) kind(name string) *kind {
	if k, ok := (*l.kinds.Load())[name]; ok {
		return k
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := *l.kinds.Load()
	if k, ok := old[name]; ok {
		return k
	}
	m := make(map[string]*kind, len(old)+1)
	for n, k := range old {
		m[n] = k
	}
	k := new(kind)
	k.last.Store(never)
	m[name] = k
	l.kinds.Store(&m)
	return k
}
