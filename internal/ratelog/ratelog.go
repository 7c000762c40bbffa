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
	"time"
)

// Log is a rate-limited logger. Safe for concurrent use.
type Log struct {
	log   *slog.Logger
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// New returns a Log writing to log at most one message of each kind per
// every.
func New(log *slog.Logger, every time.Duration) *Log {
	return &Log{log: log, every: every, last: map[string]time.Time{}, held: map[string]int{}}
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
func (l *Log) Due(kind string) (suppressed int, due bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[kind]; ok && now.Sub(t) < l.every {
		l.held[kind]++
		return 0, false
	}
	l.last[kind] = now
	suppressed = l.held[kind]
	l.held[kind] = 0
	return suppressed, true
}
