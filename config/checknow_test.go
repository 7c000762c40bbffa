package config_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// logBuffer is a slog handler's output that tests read while a watcher
// writes it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLoggedReloader(t *testing.T, initial string) (*config.Holder, *config.Reloader, *prometheus.Registry, *logBuffer) {
	t.Helper()
	cfg, err := config.Parse([]byte(initial), "initial.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h, err := config.NewHolder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg, logs := prometheus.NewRegistry(), &logBuffer{}
	r, err := config.NewReloader(h, config.ReloaderOptions{Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return h, r, reg, logs
}

// oversized is a valid configuration padded with comments past
// config.MaxSize: readable, and never valid.
func oversized(version string, limit int) string {
	return doc(version, limit) + strings.Repeat("# padding\n", config.MaxSize/10+1)
}

// A configuration file over the size limit is readable and invalid: it
// counts once as result="invalid" (which RateLimitConfigRejected alerts
// on), not as an unreadable source on every poll.
func TestWatchFileOversizedIsInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, doc("1", 10))
	h, r, reg, logs := newLoggedReloader(t, doc("1", 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.WatchFile(ctx, path, 10*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	writeFile(t, path, oversized("2", 20))
	waitFor(t, "the oversized file to be rejected", func() bool { return reloads(t, reg, "invalid") == 1 })
	time.Sleep(150 * time.Millisecond) // about 15 polls
	if inv, e := reloads(t, reg, "invalid"), reloads(t, reg, "error"); inv != 1 || e > 0 {
		t.Fatalf("invalid %d, error %d after the oversized file stayed: want it counted once as invalid", inv, e)
	}
	if limitOf(t, h) != 10 {
		t.Fatal("the oversized file replaced the configuration")
	}
	if !strings.Contains(logs.String(), "bytes (max 1048576 for a policies file)") {
		t.Fatalf("the rejection was not logged with its reason:\n%s", logs)
	}
	writeFile(t, path, doc("3", 30))
	waitFor(t, "the fixed file to apply", func() bool { return limitOf(t, h) == 30 })
}

// After a failed read, the first good one says so in the log, so that the
// error line has an end.
func TestWatchFileSaysReadableAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, doc("1", 10))
	_, r, reg, logs := newLoggedReloader(t, doc("1", 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.WatchFile(ctx, path, 10*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	moved := path + ".away"
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the missing file to count as an error", func() bool { return reloads(t, reg, "error") >= 1 })
	if err := os.Rename(moved, path); err != nil { // the same file, the same content
		t.Fatal(err)
	}
	waitFor(t, "the log to say the file is readable again", func() bool {
		return strings.Contains(logs.String(), "configuration source readable again")
	})
	if a := reloads(t, reg, "applied"); a != 0 {
		t.Fatalf("applied %d: the same content must not be applied again", a)
	}
}

// CheckNow reads the file at once, even when its modification time and
// size are those of the last poll (an edit in place within the file
// system's clock tick, a copy with cp -p); the next poll would not.
func TestWatchFileCheckNow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, doc("1", 10))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	h, r, _, _ := newLoggedReloader(t, doc("1", 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.WatchFile(ctx, path, time.Hour); close(done) }() // no poll during the test
	t.Cleanup(func() { cancel(); <-done })

	// The same size, in place (the same inode), the old modification time.
	if err := os.WriteFile(path, []byte(doc("1", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	r.CheckNow()
	waitFor(t, "CheckNow to apply the edited file", func() bool { return limitOf(t, h) == 20 })
}

// watchEnvoy starts an Envoy descriptor reloader on a directory holding
// rl.yaml (domain api, 10 per second), watched every interval until the
// test ends or stop is called, and returns it, its metrics' registry, its
// log, the file and stop (which returns once Watch has).
func watchEnvoy(t *testing.T, interval time.Duration) (r *config.EnvoyReloader, reg *prometheus.Registry, logs *logBuffer, path string, stop func()) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "rl.yaml")
	writeFile(t, path, envoyDoc("api", 10))
	reg, logs = prometheus.NewRegistry(), &logBuffer{}
	r, err := config.NewEnvoyReloader([]string{dir}, config.ReloaderOptions{Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Watch(ctx, interval); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return r, reg, logs, path, stop
}

// The Envoy descriptor files: an oversized one counts once as invalid,
// and CheckNow reloads at once.
func TestEnvoyReloaderOversizedAndCheckNow(t *testing.T) {
	r, reg, logs, path, stop := watchEnvoy(t, 10*time.Millisecond)

	writeFile(t, path, envoyDoc("api", 10)+strings.Repeat("# padding\n", envoyrls.MaxConfigSize/10+1))
	waitFor(t, "the oversized file to be rejected", func() bool { return reloadsOf(t, reg, "envoy", "invalid") == 1 })
	time.Sleep(150 * time.Millisecond)
	if inv, e := reloadsOf(t, reg, "envoy", "invalid"), reloadsOf(t, reg, "envoy", "error"); inv != 1 || e > 0 {
		t.Fatalf("invalid %d, error %d after the oversized file stayed: want it counted once as invalid", inv, e)
	}
	if got := r.Load().Domains(); len(got) != 1 || got[0] != "api" {
		t.Fatalf("domains %v: the oversized file replaced the configuration", got)
	}
	stop()

	// CheckNow: an in-place edit of the same size and modification time.
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { r.Watch(ctx2, time.Hour); close(done2) }()
	t.Cleanup(func() { cancel2(); <-done2 })
	// The oversized file is judged again on CheckNow (it was skipped as
	// seen), then the restored file is the active one: the rejection is
	// over (logged so, a walk found "unchanged" there), and a CheckNow
	// after that finds it unchanged.
	writeFile(t, path, envoyDoc("api", 10)+strings.Repeat("# padding\n", envoyrls.MaxConfigSize/10+1))
	r.CheckNow()
	waitFor(t, "the oversized file rejected again", func() bool { return reloadsOf(t, reg, "envoy", "invalid") == 2 })
	writeFile(t, path, envoyDoc("api", 10))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	r.CheckNow()
	waitFor(t, "the restored file found active again", func() bool {
		return strings.Contains(logs.String(), "Envoy descriptor configuration holds the active configuration again")
	})
	if strings.Contains(logs.String(), "Envoy descriptor configuration unchanged") {
		t.Fatalf("a restore after a rejection logged as unchanged:\n%s", logs.String())
	}
	r.CheckNow()
	waitFor(t, "the restored file found unchanged", func() bool {
		return strings.Contains(logs.String(), "Envoy descriptor configuration unchanged")
	})
	applied := reloadsOf(t, reg, "envoy", "applied")
	if err := os.WriteFile(path, []byte(envoyDoc("web", 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	r.CheckNow()
	waitFor(t, "CheckNow to apply the edited file", func() bool {
		d := r.Load().Domains()
		return len(d) == 1 && d[0] == "web"
	})
	if a := reloadsOf(t, reg, "envoy", "applied"); a != applied+1 {
		t.Fatalf("applied %d, want %d", a, applied+1)
	}
}

// A key of another type under <prefix>:config is never a document: the
// watcher counts it once as invalid, a push refuses it without --force and
// replaces it with.
func TestRedisWrongTypeDocument(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, err := config.KeysFor(fmt.Sprintf("wt%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := client.HSet(ctx, keys.Config, "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	h, r, reg, _ := newLoggedReloader(t, doc("1", 10))
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.WatchRedis(wctx, client, keys, 20*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the hash to be rejected", func() bool { return reloads(t, reg, "invalid") == 1 })
	time.Sleep(150 * time.Millisecond)
	if inv, e := reloads(t, reg, "invalid"), reloads(t, reg, "error"); inv != 1 || e > 0 {
		t.Fatalf("invalid %d, error %d: want the hash counted once as invalid", inv, e)
	}

	_, err = config.PublishWith(ctx, client, keys, []byte(doc("2", 20)), config.PublishOptions{})
	if err == nil || !strings.Contains(err.Error(), "the key holds a hash, not a string document") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("push over a hash without force: %v", err)
	}
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("2", 20)), config.PublishOptions{Force: true}); err != nil {
		t.Fatalf("push over a hash with force: %v", err)
	}
	waitFor(t, "the pushed document to apply", func() bool { return limitOf(t, h) == 20 })
	if typ := client.Type(ctx, keys.Config).Val(); typ != "string" {
		t.Fatalf("the key is a %s after the forced push", typ)
	}
	if _, err := config.LoadRedis(ctx, client, keys); err != nil && !errors.Is(err, config.ErrNotFound) {
		t.Fatal(err)
	}
}

// CheckNow (SIGHUP) judges the stored document again: one rejected before
// (oversized, not parsing) is counted and logged again, so the operator
// who sent the signal sees why it is still not applied; an unchanged
// valid one logs "configuration unchanged". The Redis watcher skipped a
// document it had seen, and said nothing.
func TestCheckNowJudgesAgain(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, err := config.KeysFor(fmt.Sprintf("again%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, doc("1", 10))
	ctx := context.Background()
	if err := client.Set(ctx, keys.Config, doc("1", 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"file", "redis"} {
		t.Run(src, func(t *testing.T) {
			h, r, reg, logs := newLoggedReloader(t, doc("1", 10))
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			put := func(data string) {
				if src == "file" {
					writeFile(t, path, data)
				} else if err := client.Set(ctx, keys.Config, data, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			go func() {
				if src == "file" {
					r.WatchFile(wctx, path, time.Hour)
				} else {
					r.WatchRedis(wctx, client, keys, time.Hour)
				}
				close(done)
			}()
			t.Cleanup(func() { cancel(); <-done; put(doc("1", 10)) })
			r.CheckNow()
			waitFor(t, "configuration unchanged in the log", func() bool { return strings.Contains(logs.String(), "configuration unchanged") })
			for i, bad := range []string{oversized("2", 20), "version: \"3\"\npolicies: [oops\n"} {
				put(bad)
				for n := 1; n <= 2; n++ {
					r.CheckNow()
					want := 2*i + n
					waitFor(t, fmt.Sprintf("rejection %d counted", want), func() bool { return reloads(t, reg, "invalid") == want })
				}
			}
			if got := strings.Count(logs.String(), "configuration rejected"); got != 4 {
				t.Fatalf("%d rejections logged, want 4 (each document twice):\n%s", got, logs)
			}
			// The Holder says the source holds something else than what
			// runs (GET /admin/v1/config shows it), until it holds what
			// runs again.
			if rej := h.LastRejected(); rej == nil || !strings.Contains(rej.Error, "YAML syntax") || rej.At.IsZero() {
				t.Fatalf("LastRejected = %+v, want the document that does not parse", rej)
			}
			put(doc("1", 10))
			r.CheckNow()
			waitFor(t, "the rejection forgotten once the source holds the active document", func() bool { return h.LastRejected() == nil })
		})
	}
}

// TestApplyActiveAgainEndsTheRejection: after a rejected document, reading
// the active one again (a poll after the file was put back) forgets the
// rejection and logs it, so that the rejection's error line has an end
// (it logged nothing).
func TestApplyActiveAgainEndsTheRejection(t *testing.T) {
	h, r, _, logs := newLoggedReloader(t, doc("1", 10))
	if _, err := r.Apply([]byte("policies: [oops"), "f.yaml"); err == nil || h.LastRejected() == nil {
		t.Fatalf("a broken document: %v, rejected %v", err, h.LastRejected())
	}
	if _, err := r.Apply([]byte(doc("1", 10)), "f.yaml"); err != nil {
		t.Fatal(err)
	}
	if h.LastRejected() != nil || !strings.Contains(logs.String(), "configuration source holds the active configuration again") {
		t.Fatalf("after the active document again: rejected %v, log:\n%s", h.LastRejected(), logs)
	}
}

// TestUnreadableSourceIsHeld: while the source cannot be read (the file
// deleted, the Redis key deleted), Holder.Unreadable says so with the
// error and since when, whatever an earlier rejection says; a successful
// read clears it. A walk found GET /admin/v1/config showing only a stale
// rejection while the source held nothing.
func TestUnreadableSourceIsHeld(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, err := config.KeysFor(fmt.Sprintf("unread%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	ctx := context.Background()
	for _, src := range []string{"file", "redis"} {
		t.Run(src, func(t *testing.T) {
			put := func(data string) {
				if src == "file" {
					writeFile(t, path, data)
				} else if err := client.Set(ctx, keys.Config, data, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			remove := func() {
				if src == "file" {
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
				} else if err := client.Del(ctx, keys.Config).Err(); err != nil {
					t.Fatal(err)
				}
			}
			put(doc("1", 10))
			h, r, reg, _ := newLoggedReloader(t, doc("1", 10))
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				if src == "file" {
					r.WatchFile(wctx, path, time.Hour)
				} else {
					r.WatchRedis(wctx, client, keys, time.Hour)
				}
				close(done)
			}()
			t.Cleanup(func() { cancel(); <-done })
			put("version: \"1\"\npolicies: [oops\n")
			r.CheckNow()
			waitFor(t, "the broken document rejected", func() bool { return h.LastRejected() != nil })
			if h.Unreadable() != nil {
				t.Fatalf("Unreadable = %+v while the source was read", h.Unreadable())
			}
			remove()
			r.CheckNow()
			waitFor(t, "the source reported unreadable", func() bool { return h.Unreadable() != nil })
			first := *h.Unreadable()
			if first.Error == "" || first.At.IsZero() {
				t.Fatalf("Unreadable = %+v, want an error and a time", first)
			}
			time.Sleep(20 * time.Millisecond)
			r.CheckNow()
			waitFor(t, "a second failed read", func() bool { return reloads(t, reg, "error") == 2 })
			if u := h.Unreadable(); !u.At.Equal(first.At) {
				t.Fatalf("a second failure moved since from %v to %v: want the first failure's time", first.At, u.At)
			}
			put(doc("1", 10))
			r.CheckNow()
			waitFor(t, "Unreadable cleared by a good read", func() bool { return h.Unreadable() == nil })
		})
	}
}

// An ACL user without the announcement channel (Redis 7's default
// acl-pubsub-default resetchannels) is refused the subscription with
// NOPERM. The watcher dropped that error and fell back on the poll in
// silence; it now says so once, naming the channel, the grant and that
// changes wait for the poll, and the poll still applies them.
func TestRedisWatchSaysSubscriptionRefused(t *testing.T) {
	rs := redistest.Start(t)
	admin := rs.Client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "nochan", "reset", "on", ">pw", "~sr:*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: "nochan", Password: "pw"})
	t.Cleanup(func() { client.Close() })
	keys, _ := config.KeysFor("sr")
	h, r, _, logs := newLoggedReloader(t, doc("1", 10))
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.WatchRedis(wctx, client, keys, 50*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	if _, err := config.Publish(ctx, admin, keys, []byte(doc("2", 20))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the poll to apply version 2", func() bool { return limitOf(t, h) == 20 })
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Fatalf("%d WARN lines, want one about the refused subscription:\n%s", n, out)
	}
	for _, want := range []string{"channel=sr:config:changed", "NOPERM", `&sr:config:changed (or &sr:*)`, "poll"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not name %q:\n%s", want, out)
		}
	}
}
