package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDue: the first message of a kind is due, the next ones within the
// interval are counted, and the first due after it carries their count;
// kinds are independent.
func TestDue(t *testing.T) {
	l := New(slog.New(slog.DiscardHandler), time.Hour)
	if n, due := l.Due("a"); !due || n != 0 {
		t.Fatalf("first Due(a) = %d, %v; want 0, true", n, due)
	}
	for range 3 {
		if _, due := l.Due("a"); due {
			t.Fatal("Due(a) within the interval is due")
		}
	}
	if n, due := l.Due("b"); !due || n != 0 {
		t.Fatalf("first Due(b) = %d, %v; want 0, true", n, due)
	}
	l.age("a", time.Hour) // the interval has passed
	if n, due := l.Due("a"); !due || n != 3 {
		t.Fatalf("Due(a) after the interval = %d, %v; want 3, true", n, due)
	}
	if _, due := l.Due("a"); due {
		t.Fatal("Due(a) right after a due one is due")
	}
}

// TestLogSuppressedCount: Log writes the first message, holds the next
// ones back, and writes the count held back on the next line written.
func TestLogSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	for range 5 {
		l.Warn("k", "failed", "error", "boom")
	}
	if got := strings.Count(buf.String(), "msg=failed"); got != 1 {
		t.Fatalf("%d lines for 5 messages within the interval, want 1:\n%s", got, buf.String())
	}
	l.age("k", time.Hour)
	l.Warn("k", "failed", "error", "boom")
	if !strings.Contains(buf.String(), "suppressed=4") {
		t.Fatalf("no suppressed=4 on the line after the interval:\n%s", buf.String())
	}
}

// age moves the last message of kind name d into the past.
func (l *Log) age(name string, d time.Duration) {
	l.kind(name).last.Add(-int64(d))
}

// TestDueConcurrent: of many callers asking at once within one
// interval, exactly one is due, and the next due after the interval
// counts every other one as suppressed.
func TestDueConcurrent(t *testing.T) {
	l := New(slog.New(slog.DiscardHandler), time.Hour)
	const callers, each = 8, 1000
	var wg sync.WaitGroup
	var dues atomic.Int64
	for range callers {
		wg.Go(func() {
			for range each {
				if _, due := l.Due("k"); due {
					dues.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := dues.Load(); got != 1 {
		t.Fatalf("%d due of %d within one interval, want 1", got, callers*each)
	}
	l.age("k", time.Hour)
	if n, due := l.Due("k"); !due || n != callers*each-1 {
		t.Fatalf("Due after the interval = %d, %v; want %d, true", n, due, callers*each-1)
	}
}

// BenchmarkDueHeld is the cost of a message held back, from every
// core at once (serve's degraded decisions during an outage).
func BenchmarkDueHeld(b *testing.B) {
	l := New(slog.New(slog.DiscardHandler), time.Hour)
	l.Due("k")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Due("k")
		}
	})
}
