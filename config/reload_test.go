package config_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/faulttest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// doc returns a small valid configuration whose single layer has limit.
func doc(version string, limit int) string {
	return fmt.Sprintf("version: %q\npolicies:\n  - name: api\n    layers:\n      - {name: u, algorithm: sliding_window, limit: %d, window: 1m, dimension: user}\n", version, limit)
}

func limitOf(t *testing.T, h *config.Holder) int64 {
	t.Helper()
	p, ok := h.Load().Policy("api")
	if !ok {
		t.Fatal("policy api missing")
	}
	return p.Layers[0].Policy("").Limit
}

func newReloader(t *testing.T, initial string) (*config.Holder, *config.Reloader, *prometheus.Registry) {
	t.Helper()
	h, r, reg, _ := newLoggedReloader(t, initial)
	return h, r, reg
}

func reloads(t *testing.T, reg *prometheus.Registry, result string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_config_reload_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return -1
}

// waitFor polls cond every 10ms until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestApply(t *testing.T) {
	h, r, reg := newReloader(t, doc("1", 10))
	if _, err := r.Apply([]byte(doc("1", 10)), "same.yaml"); err != nil || reloads(t, reg, "applied") != 0 {
		t.Fatalf("identical document: err %v, applied %d", err, reloads(t, reg, "applied"))
	}
	if _, err := r.Apply([]byte(doc("2", 20)), "new.yaml"); err != nil || limitOf(t, h) != 20 || h.Load().Source() != "new.yaml" {
		t.Fatalf("apply: %v, limit %d", err, limitOf(t, h))
	}
	old := h.Load()
	_, err := r.Apply([]byte(strings.Replace(doc("3", 30), "sliding_window", "sliding_windw", 1)), "bad.yaml")
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), `bad.yaml:5:30: layer "u" of policy "api": unknown algorithm "sliding_windw"`) {
		t.Fatalf("invalid document: %v", err)
	}
	if h.Load() != old {
		t.Fatal("an invalid document replaced the configuration")
	}
	if a, i := reloads(t, reg, "applied"), reloads(t, reg, "invalid"); a != 1 || i != 1 {
		t.Fatalf("metrics applied=%d invalid=%d", a, i)
	}
}

func TestApplyVersioned(t *testing.T) {
	h, r, _ := newReloader(t, doc("5", 10))
	noVersion := "policies:\n  - name: api\n    layers:\n      - {name: u, algorithm: gcra, limit: 3, window: 1m, dimension: user}\n"
	if _, err := r.ApplyVersioned([]byte(noVersion), "redis:k"); err == nil || !strings.Contains(err.Error(), "needs a version") {
		t.Fatalf("unversioned: %v", err)
	}
	if _, err := r.ApplyVersioned([]byte(doc("5", 99)), "redis:k"); err == nil || !strings.Contains(err.Error(), `version "5" is already active with different content`) {
		t.Fatalf("same version, new content: %v", err)
	}
	if limitOf(t, h) != 10 {
		t.Fatal("rejected documents changed the configuration")
	}
	if _, err := r.ApplyVersioned([]byte(doc("6", 99)), "redis:k"); err != nil || limitOf(t, h) != 99 {
		t.Fatalf("bumped version: %v", err)
	}
}

// TestConcurrentReadersSeeWholeConfigs: readers racing with reloads only
// ever see one of the documents, never a mix.
func TestConcurrentReadersSeeWholeConfigs(t *testing.T) {
	h, r, _ := newReloader(t, doc("a", 10))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := h.Load()
				p, _ := c.Policy("api")
				if want := map[string]int64{"a": 10, "b": 20}[c.Version()]; p.Layers[0].Policy("").Limit != want {
					t.Errorf("version %s with limit %d", c.Version(), p.Layers[0].Policy("").Limit)
					return
				}
			}
		}()
	}
	for i := range 200 {
		v, l := "a", 10
		if i%2 == 0 {
			v, l = "b", 20
		}
		if _, err := r.Apply([]byte(doc(v, l)), "x.yaml"); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

func TestWatchFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	write := func(s string) {
		t.Helper()
		// Write elsewhere and rename, as editors and config management do.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(doc("1", 10))
	h, r, reg := newReloader(t, doc("1", 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.WatchFile(ctx, path, 20*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	write(doc("2", 20))
	waitFor(t, "the new file to apply", func() bool { return limitOf(t, h) == 20 })

	write("policies: [\n")
	waitFor(t, "the broken file to be rejected", func() bool { return reloads(t, reg, "invalid") == 1 })
	if limitOf(t, h) != 20 {
		t.Fatal("a broken file replaced the configuration")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the missing file to count as an error", func() bool { return reloads(t, reg, "error") >= 1 })
	write(doc("3", 30))
	waitFor(t, "the fixed file to apply", func() bool { return limitOf(t, h) == 30 })
	time.Sleep(100 * time.Millisecond)
	if a, i := reloads(t, reg, "applied"), reloads(t, reg, "invalid"); a != 2 || i != 1 {
		t.Fatalf("applied %d invalid %d: an unchanged file must not be applied or rejected again", a, i)
	}
}

func TestRedisPublishAndWatch(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, err := config.KeysFor(fmt.Sprintf("pw%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := config.LoadRedis(ctx, client, keys); !errors.Is(err, config.ErrNotFound) {
		t.Fatalf("empty Redis: %v", err)
	}
	if _, err := config.Publish(ctx, client, keys, []byte(doc("1", 10))); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadRedis(ctx, client, keys)
	if err != nil || cfg.Version() != "1" {
		t.Fatalf("load: %v", err)
	}
	h, err := config.NewHolder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := config.NewReloader(h, config.ReloaderOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	// Poll once an hour: only the pub/sub notification can deliver.
	go func() { r.WatchRedis(wctx, client, keys, time.Hour); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the watcher to subscribe", func() bool {
		n, err := client.PubSubNumSub(ctx, keys.Channel).Result()
		return err == nil && n[keys.Channel] == 1
	})

	if _, err := config.Publish(ctx, client, keys, []byte(doc("2", 20))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the published configuration to apply", func() bool { return limitOf(t, h) == 20 })

	// Publish refuses an invalid document and leaves Redis as it was.
	if _, err := config.Publish(ctx, client, keys, []byte("policies: nope\n")); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("publish invalid: %v", err)
	}
	if got, _ := client.Get(ctx, keys.Config).Result(); got != doc("2", 20) {
		t.Fatalf("Redis holds %q after a refused publish", got)
	}
	// A document written around Publish is still checked by every
	// instance, and rejected.
	client.Set(ctx, keys.Config, doc("2", 77), 0)
	client.Publish(ctx, keys.Channel, "2")
	waitFor(t, "the same-version document to be rejected", func() bool { return reloads(t, reg, "invalid") == 1 })
	client.Set(ctx, keys.Config, "version: 3\npolicies: [", 0)
	client.Publish(ctx, keys.Channel, "3")
	waitFor(t, "the broken document to be rejected", func() bool { return reloads(t, reg, "invalid") == 2 })
	if limitOf(t, h) != 20 {
		t.Fatalf("rejected documents changed the limit to %d", limitOf(t, h))
	}
	if _, err := config.Publish(ctx, client, keys, []byte(doc("4", 40))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "version 4", func() bool { return limitOf(t, h) == 40 && h.Load().Version() == "4" })
}

func TestRedisWatchPollsWhenNotificationIsMissed(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, _ := config.KeysFor(fmt.Sprintf("pm%d", time.Now().UnixNano()))
	h, r, _ := newReloader(t, doc("1", 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.WatchRedis(ctx, client, keys, 50*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// Stored without any PUBLISH: only the poll can find it.
	if err := client.Set(ctx, keys.Config, doc("2", 25), 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the polled configuration", func() bool { return limitOf(t, h) == 25 })
}

// TestRedisWatchReadsOnResubscribe stores a document while the watcher's
// subscription is down, as happens when the node it listens on fails over
// (a Redis Cluster primary killed: its replica took over 3 s later, and a
// floodgate config push then waited 8.5 s for the poll): nobody heard the
// announcement, and the watcher must read the document as soon as it has
// subscribed again, not at the next poll (an hour here). The watcher
// reaches Redis through a proxy whose connections are reset and then held
// in a black hole while the document is stored.
func TestRedisWatchReadsOnResubscribe(t *testing.T) {
	rs := redistest.Start(t)
	admin := rs.Client(t)
	proxy, err := faulttest.NewProxy(rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	keys, _ := config.KeysFor(fmt.Sprintf("rs%d", time.Now().UnixNano()))
	h, r, _ := newReloader(t, doc("1", 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.WatchRedis(ctx, client, keys, time.Hour); close(done) }()
	t.Cleanup(func() { cancel(); <-done; client.Close() })
	subscribers := func() int64 {
		n, err := admin.PubSubNumSub(ctx, keys.Channel).Result()
		if err != nil {
			return -1
		}
		return n[keys.Channel]
	}
	waitFor(t, "the watcher to subscribe", func() bool { return subscribers() == 1 })

	proxy.SetBlackhole(true)
	proxy.ResetConnections()
	waitFor(t, "the subscription to be gone", func() bool { return subscribers() == 0 })
	// Stored and announced while nobody listens.
	if err := admin.Set(ctx, keys.Config, doc("2", 25), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Publish(ctx, keys.Channel, "2").Err(); err != nil {
		t.Fatal(err)
	}
	proxy.SetBlackhole(false)
	proxy.ResetConnections()
	waitFor(t, "the watcher to subscribe again", func() bool { return subscribers() == 1 })
	waitFor(t, "the document stored while the subscription was down", func() bool { return limitOf(t, h) == 25 })
}

// TestWatchFileNoticesAnotherFileWithTheSameStamp swaps the file behind
// the watched path for another one of the same size and modification time:
// a Kubernetes-style "..data" symbolic link moved to another directory
// whose files carry a fixed time, as Nix store paths (time 1) and
// archives unpacked with their times do, or a rename of a copy made with
// cp -p / rsync -t. The content changed, so it must apply.
func TestWatchFileNoticesAnotherFileWithTheSameStamp(t *testing.T) {
	dir := t.TempDir()
	fixed := time.Unix(1, 0)
	for i, d := range []string{"..2026_12_03_1", "..2026_12_03_2"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, d, "floodgate.yaml")
		if err := os.WriteFile(f, []byte(doc("1", 10+i)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, fixed, fixed); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target string) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	link("..2026_12_03_1")
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.Symlink(filepath.Join("..data", "floodgate.yaml"), path); err != nil {
		t.Fatal(err)
	}
	h, r, _ := newReloader(t, doc("1", 1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.WatchFile(ctx, path, 20*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the first file to apply", func() bool { return limitOf(t, h) == 10 })

	link("..2026_12_03_2")
	waitFor(t, "the swapped-in file (same size and time, other content) to apply", func() bool { return limitOf(t, h) == 11 })

	// A plain rename of a copy that kept the old file's time and size.
	cp := path + ".new"
	if err := os.WriteFile(cp, []byte(doc("1", 12)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(cp, fixed, fixed); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cp, path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the renamed copy with the old time and size to apply", func() bool { return limitOf(t, h) == 12 })

	// A rewrite in place, same size, the old time put back (cp -p or
	// rsync --inplace -t over the file): only its ctime tells.
	if err := os.WriteFile(path, []byte(doc("1", 13)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fixed, fixed); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the file rewritten in place with its old time and size to apply", func() bool { return limitOf(t, h) == 13 })
}
