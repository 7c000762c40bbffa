package config_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// watched is a configuration source (a file, or a Redis key) under a
// Reloader's watcher polling it every 20ms.
type watched struct {
	put    func(data string) // write the source (and announce it, in Redis)
	remove func()            // delete it (and announce it, in Redis)
}

// watchSource puts initial in a source of kind src ("file" or "redis")
// and starts r's watcher on it, stopped when the test ends.
func watchSource(t *testing.T, src string, client redis.UniversalClient, r *config.Reloader, initial string) watched {
	t.Helper()
	ctx := context.Background()
	var w watched
	var watch func(context.Context)
	switch src {
	case "file":
		path := filepath.Join(t.TempDir(), "floodgate.yaml")
		w.put = func(data string) { writeFile(t, path, data) }
		w.remove = func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
		watch = func(ctx context.Context) { r.WatchFile(ctx, path, 20*time.Millisecond) }
	case "redis":
		keys, err := config.KeysFor(fmt.Sprintf("hup%d", time.Now().UnixNano()))
		if err != nil {
			t.Fatal(err)
		}
		w.put = func(data string) {
			if err := client.Set(ctx, keys.Config, data, 0).Err(); err != nil {
				t.Fatal(err)
			}
			client.Publish(ctx, keys.Channel, "x")
		}
		w.remove = func() {
			if err := client.Del(ctx, keys.Config).Err(); err != nil {
				t.Fatal(err)
			}
			client.Publish(ctx, keys.Channel, "x")
		}
		watch = func(ctx context.Context) { r.WatchRedis(ctx, client, keys, 20*time.Millisecond) }
	}
	w.put(initial)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { watch(wctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// TestCheckNowWhileUnreadableKeepsNoStaleRejection: a SIGHUP (CheckNow)
// while the source cannot be read leaves the watcher as it found it: once
// the source holds the active document again, the rejection of what it
// held before is forgotten (GET /admin/v1/config's rejected cleared) and
// the log says so, as without the SIGHUP. A config walk found the
// rejection kept until the next SIGHUP or a new version: the SIGHUP had
// set the watcher's "last read" hash to the active document's, that
// outlived the failed read, and the active document coming back was then
// skipped as already seen.
func TestCheckNowWhileUnreadableKeepsNoStaleRejection(t *testing.T) {
	client := redistest.Start(t).Client(t)
	for _, src := range []string{"file", "redis"} {
		for _, hup := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sighup=%v", src, hup), func(t *testing.T) {
				h, r, reg, logs := newLoggedReloader(t, doc("1", 10))
				w := watchSource(t, src, client, r, doc("1", 10))
				w.put("") // an empty document
				waitFor(t, "the empty document rejected", func() bool { return h.LastRejected() != nil })
				w.remove()
				waitFor(t, "the source unreadable", func() bool { return h.Unreadable() != nil })
				if hup {
					// Some reads after the CheckNow, which is then
					// surely one of them.
					errs := reloads(t, reg, "error")
					r.CheckNow()
					waitFor(t, "reads after CheckNow", func() bool { return reloads(t, reg, "error") >= errs+3 })
				}
				w.put(doc("1", 10))
				waitFor(t, "the source readable again", func() bool { return h.Unreadable() == nil })
				waitFor(t, "the rejection forgotten once the source holds the active document", func() bool {
					return h.LastRejected() == nil
				})
				// The rejection is cleared before its end is logged.
				waitFor(t, "the end of the rejection logged", func() bool {
					return strings.Contains(logs.String(), "configuration source holds the active configuration again")
				})
				if a := reloads(t, reg, "applied"); a != 0 {
					t.Fatalf("applied %d: the active document must not be applied again", a)
				}
			})
		}
	}
}

// TestCheckNowLogsUnreadable: a SIGHUP (CheckNow) logs what it found even
// when the source cannot be read, with the error, while the polls log an
// unreadable source only when its error changes. A config walk found a
// SIGHUP logging no outcome at all then.
func TestCheckNowLogsUnreadable(t *testing.T) {
	client := redistest.Start(t).Client(t)
	for _, src := range []string{"file", "redis"} {
		t.Run(src, func(t *testing.T) {
			h, r, reg, logs := newLoggedReloader(t, doc("1", 10))
			w := watchSource(t, src, client, r, doc("1", 10))
			const line = "configuration source unreadable; keeping the last good configuration"
			count := func() int { return strings.Count(logs.String(), line) }
			w.remove()
			waitFor(t, "the source unreadable", func() bool { return h.Unreadable() != nil })
			errs := reloads(t, reg, "error")
			waitFor(t, "more polls of the unreadable source", func() bool { return reloads(t, reg, "error") >= errs+5 })
			if n := count(); n != 1 {
				t.Fatalf("the unreadable source logged %d times by the polls, want once:\n%s", n, logs)
			}
			for want := 2; want <= 3; want++ {
				r.CheckNow()
				waitFor(t, fmt.Sprintf("the CheckNow's unreadable source logged (%d lines)", want), func() bool { return count() == want })
			}
			if !strings.Contains(logs.String(), "error=") {
				t.Fatalf("the unreadable line has no error:\n%s", logs)
			}
			errs = reloads(t, reg, "error")
			waitFor(t, "more polls of the unreadable source", func() bool { return reloads(t, reg, "error") >= errs+5 })
			if n := count(); n != 3 {
				t.Fatalf("%d unreadable lines after more polls, want the 3 of before:\n%s", n, logs)
			}
			w.put(doc("1", 10))
			waitFor(t, "readable again", func() bool {
				return strings.Contains(logs.String(), "configuration source readable again")
			})
		})
	}
}

// TestEnvoyCheckNowWhileUnreadable: the Envoy descriptor reloader logs a
// CheckNow's outcome when the files cannot be read, and the request ends
// there: it does not make a later poll log "unchanged" as if it had been
// asked for (a config walk found the request, and the active files' hash
// it set as last read, outliving the failed read).
func TestEnvoyCheckNowWhileUnreadable(t *testing.T) {
	r, reg, logs, path, _ := watchEnvoy(t, 20*time.Millisecond)

	const line = "Envoy descriptor configuration unreadable; keeping the last good one"
	count := func() int { return strings.Count(logs.String(), line) }
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the files unreadable", func() bool { return reloadsOf(t, reg, "envoy", "error") >= 1 })
	errs := reloadsOf(t, reg, "envoy", "error")
	waitFor(t, "more polls", func() bool { return reloadsOf(t, reg, "envoy", "error") >= errs+5 })
	if n := count(); n != 1 {
		t.Fatalf("the unreadable files logged %d times by the polls, want once:\n%s", n, logs)
	}
	errs = reloadsOf(t, reg, "envoy", "error")
	r.CheckNow()
	waitFor(t, "reads after CheckNow", func() bool { return reloadsOf(t, reg, "envoy", "error") >= errs+3 })
	writeFile(t, path, envoyDoc("api", 10))
	waitFor(t, "readable again", func() bool {
		return strings.Contains(logs.String(), "Envoy descriptor configuration readable again")
	})
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(logs.String(), "Envoy descriptor configuration unchanged") {
		t.Errorf("a poll logged the CheckNow's outcome after the failed read:\n%s", logs)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d unreadable lines, want 2: the CheckNow's outcome missing:\n%s", n, logs)
	}
	r.CheckNow()
	waitFor(t, "the CheckNow's unchanged files logged", func() bool {
		return strings.Contains(logs.String(), "Envoy descriptor configuration unchanged")
	})
}
