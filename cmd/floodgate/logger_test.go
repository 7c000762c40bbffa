package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestJSONLogDurations: the JSON log writes durations as the text log
// does ("3s"), not as bare nanoseconds (a walk of the docs read
// "delay":3000000000 in serve's shutdown line).
func TestJSONLogDurations(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("shutting down", "delay", 3*time.Second, "timeout", 1500*time.Millisecond, "n", 7)
	if out := buf.String(); !strings.Contains(out, `"delay":"3s"`) || !strings.Contains(out, `"timeout":"1.5s"`) || !strings.Contains(out, `"n":7`) {
		t.Fatalf("log line %s", out)
	}
}
