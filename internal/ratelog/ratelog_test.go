package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
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
	l.mu.Lock()
	l.last["a"] = time.Now().Add(-time.Hour) // the interval has passed
	l.mu.Unlock()
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
	l.mu.Lock()
	l.last["k"] = time.Now().Add(-time.Hour)
	l.mu.Unlock()
	l.Warn("k", "failed", "error", "boom")
	if !strings.Contains(buf.String(), "suppressed=4") {
		t.Fatalf("no suppressed=4 on the line after the interval:\n%s", buf.String())
	}
}
