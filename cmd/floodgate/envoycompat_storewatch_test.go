package main

import (
	"bytes"
	"errors"
	"fmt"
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

// TestStoreWatchSentinelsInAnyOrder: every sentinel refusing at start,
// go-redis's error joins their failures in the order they came; the same
// failures in another order are the same outage, logged once. A walk saw
// "backend not reachable yet" about once a second for as long as the
// sentinels were down (12 lines in 15 s, each naming them in another
// order).
func TestStoreWatchSentinelsInAnyOrder(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var w storeWatch
	now := time.Unix(1_800_000_000, 0)
	refused := func(order ...string) error {
		var errs []error
		for _, a := range order {
			errs = append(errs, errors.New("dial tcp "+a+": connect: connection refused"))
		}
		return fmt.Errorf("redis: all sentinels specified in configuration are unreachable: %w", errors.Join(errs...))
	}
	for _, order := range [][]string{{"a", "b", "c"}, {"b", "a", "c"}, {"c", "b", "a"}, {"a", "c", "b"}} {
		now = now.Add(time.Second)
		w.observe(log, nil, refused(order...), now)
	}
	if n := strings.Count(logs.String(), "backend not reachable yet"); n != 1 {
		t.Errorf("the same three refusals in four orders logged %d times, want once:\n%s", n, logs.String())
	}
	w.observe(log, nil, refused("a", "b"), now.Add(time.Second))
	if n := strings.Count(logs.String(), "backend not reachable yet"); n != 2 {
		t.Errorf("another set of failures not logged:\n%s", logs.String())
	}
}
