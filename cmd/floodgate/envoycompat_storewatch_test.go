package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/envoycompat"
)

// TestStoreWatchLogsOutagesAndPrimaries steps envoy-compat's health
// watch of a Redis Cluster through an outage of every primary after one
// was down: the outage's later errors do not say "yet" (the store was
// healthy), and the primary still down once the others answer again is
// named at once. It was named again only by the once-a-minute repeat
// (the set logged before the outage was kept through it), and every
// distinct error of an outage after a healthy spell was "backend not
// reachable yet".
func TestStoreWatchLogsOutagesAndPrimaries(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var w storeWatch
	now := time.Unix(1_800_000_000, 0)
	c := []*envoycompat.NodeError{{Addr: "127.0.0.1:22602", Err: errors.New("connection refused")}}
	const notAnswering = "redis cluster primaries not answering"
	for _, st := range []struct {
		name        string
		down        []*envoycompat.NodeError
		err         error
		changed, up bool
		want        []string // in the log of the step
		notWant     []string
	}{
		{name: "first probe fails", err: errors.New("dial a"), want: []string{"backend not reachable yet"}},
		{name: "answered", changed: true, up: true, want: []string{"backend reachable"}},
		{name: "one primary down", down: c, up: true, want: []string{notAnswering, "down=127.0.0.1:22602"}},
		{name: "every primary down", err: errors.New("no primary answered: a, b, c"), changed: true,
			want: []string{"backend not reachable; /healthcheck answers 500 until it is (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)"}},
		{name: "another error of the outage", err: errors.New("no primary answered: a, b"),
			want: []string{"backend still not reachable"}, notWant: []string{"yet"}},
		{name: "the same error", err: errors.New("no primary answered: a, b"), notWant: []string{"reachable"}},
		{name: "two answer again", down: c, changed: true, up: true,
			want: []string{"backend reachable", notAnswering, "down=127.0.0.1:22602"}},
		{name: "still the same one down", down: c, up: true, notWant: []string{notAnswering}},
	} {
		logs.Reset()
		now = now.Add(time.Second)
		changed, up := w.observe(log, st.down, st.err, now)
		if changed != st.changed || up != st.up {
			t.Errorf("%s: changed %v, up %v; want %v, %v", st.name, changed, up, st.changed, st.up)
		}
		out := logs.String()
		for _, s := range st.want {
			if !strings.Contains(out, s) {
				t.Errorf("%s: log %q, want %q", st.name, out, s)
			}
		}
		for _, s := range st.notWant {
			if strings.Contains(out, s) {
				t.Errorf("%s: log %q, want no %q", st.name, out, s)
			}
		}
	}
}
