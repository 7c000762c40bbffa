package main

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSecondSignalExits: a second SIGTERM during the shutdown's
// --shutdown-delay ends serve at once instead of waiting out the delay
// (a minute here); the first one alone leaves it waiting.
func TestServeSecondSignalExits(t *testing.T) {
	s := startService(t, "--shutdown-delay", "1m")
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	const draining = "shutting down: readiness off, draining"
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, ok := s.Logged(draining); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log 30 s after SIGTERM:\n%s", draining, s.Logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-s.Done():
		t.Fatalf("serve exited during its minute of --shutdown-delay after one SIGTERM: %v\n%s", s.Err(), s.Logs())
	case <-time.After(200 * time.Millisecond):
	}
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after a second SIGTERM (its --shutdown-delay is a minute)\n%s", s.Logs())
	}
	var ee *exec.ExitError
	if err := s.Err(); !errors.As(err, &ee) {
		t.Fatalf("serve ended with %v after the second SIGTERM, want its death by the signal", err)
	}
	if strings.Contains(s.Logs(), "floodgate stopped") {
		t.Errorf("serve logged a clean stop after the second SIGTERM:\n%s", s.Logs())
	}
}
