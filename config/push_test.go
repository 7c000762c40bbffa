package config_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"1", "1", 0}, {"1", "2", -1}, {"10", "9", 1}, {"010", "10", 0},
		{"2026-12-01.2", "2026-12-01.10", -1}, {"v1.9", "v1.10", -1}, {"v2", "v10", -1},
		{"1", "1a", -1}, {"b", "a", 1}, {"", "1", -1},
	} {
		if got := config.CompareVersions(c.a, c.b); got != c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := config.CompareVersions(c.b, c.a); got != -c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

// TestPublishVersionRules: a version already published with other content
// is refused (it used to be stored, and instances then ran two documents
// under one version), going back needs Force, the same document again is
// fine; instances watching converge on the stored document.
func TestPublishVersionRules(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	keys, _ := config.KeysFor(fmt.Sprintf("push%d", time.Now().UnixNano()))
	if _, err := config.Publish(ctx, client, keys, []byte(doc("5", 10))); err != nil {
		t.Fatal(err)
	}
	// An instance started now runs version 5.
	h, r, _ := newReloader(t, doc("0", 1))
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.WatchRedis(wctx, client, keys, 50*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "version 5 to apply", func() bool { return limitOf(t, h) == 10 })

	if _, err := config.Publish(ctx, client, keys, []byte(doc("5", 99))); !errors.Is(err, config.ErrVersionConflict) || !strings.Contains(err.Error(), "bump the version") {
		t.Fatalf("same version, other content: %v, want ErrVersionConflict", err)
	}
	if got, _ := client.Get(ctx, keys.Config).Result(); got != doc("5", 10) {
		t.Fatalf("Redis holds %q after a refused push", got)
	}
	if _, err := config.Publish(ctx, client, keys, []byte(doc("5", 10))); err != nil {
		t.Fatalf("the same document again: %v", err)
	}
	if _, err := config.Publish(ctx, client, keys, []byte(doc("10", 30))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "version 10 to apply", func() bool { return limitOf(t, h) == 30 })
	if _, err := config.Publish(ctx, client, keys, []byte(doc("9", 40))); !errors.Is(err, config.ErrVersionConflict) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("older version: %v, want ErrVersionConflict", err)
	}
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("10", 50)), config.PublishOptions{Force: true}); !errors.Is(err, config.ErrVersionConflict) {
		t.Fatalf("forced push of a published version with other content: %v", err)
	}
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("9", 40)), config.PublishOptions{Force: true}); err != nil {
		t.Fatalf("forced rollback: %v", err)
	}
	waitFor(t, "the rollback to apply", func() bool { return limitOf(t, h) == 40 })
	// A second instance started now runs exactly what the first runs.
	cfg, err := config.LoadRedis(ctx, client, keys)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Version() != h.Load().Version() || cfg.Hash() != h.Load().Hash() {
		t.Fatalf("new instance: version %q hash %s; running one: %q %s", cfg.Version(), cfg.Hash(), h.Load().Version(), h.Load().Hash())
	}
}

// TestHugeDocumentNotRead: a value far over the 1 MiB limit under the
// configuration key is refused after STRLEN, without being transferred
// (it used to be read whole on every poll).
func TestHugeDocumentNotRead(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	keys, _ := config.KeysFor(fmt.Sprintf("huge%d", time.Now().UnixNano()))
	if err := client.Set(ctx, keys.Config, strings.Repeat("x", 16<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	sent := func() int64 {
		info, err := client.Info(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no total_net_output_bytes in INFO")
		return 0
	}
	before := sent()
	_, err := config.LoadRedis(ctx, client, keys)
	after := sent()
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "16777216 bytes") {
		t.Fatalf("load: %v, want an invalid document of 16777216 bytes", err)
	}
	if d := after - before; d > 64<<10 {
		t.Fatalf("Redis sent %d bytes to check a 16 MiB document", d)
	}
	if _, err := config.Publish(ctx, client, keys, []byte(doc("1", 5))); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("publish over an oversized document: %v, want a refusal naming --force", err)
	}
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("1", 5)), config.PublishOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

// TestSignedConfiguration: an instance verifying signatures applies a
// document pushed with the key and refuses an unsigned one, one signed
// with another key, and one edited after signing; the signature line is
// a YAML comment, so instances that do not verify read it as usual.
func TestSignedConfiguration(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	keys, _ := config.KeysFor(fmt.Sprintf("sign%d", time.Now().UnixNano()))
	key := []byte("0123456789abcdef0123456789abcdef-sign")
	if _, err := config.Sign([]byte(doc("1", 1)), []byte("short")); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("short key: %v", err)
	}
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("1", 10)), config.PublishOptions{SignKey: key}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadRedisVerified(ctx, client, keys, key)
	if err != nil || cfg.Version() != "1" {
		t.Fatalf("signed document: %v", err)
	}
	// An unsigned push over a signed document would split a fleet whose
	// verifying instances refuse it: refused unless forced.
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("2", 20)), config.PublishOptions{}); !errors.Is(err, config.ErrSignature) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("unsigned push over a signed document: %v, want ErrSignature naming --force", err)
	}
	if cfg, err := config.LoadRedisVerified(ctx, client, keys, key); err != nil || cfg.Version() != "1" {
		t.Fatalf("after the refused push: %v %v; want the signed version 1 still stored", cfg, err)
	}
	if _, err := config.LoadRedis(ctx, client, keys); err != nil {
		t.Fatalf("a signed document read without verifying: %v", err)
	}
	signed, _ := client.Get(ctx, keys.Config).Result()
	// A missing or short key is said to be one, not "another key".
	if err := config.Verify([]byte(signed), nil); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "verification key of 0 bytes") {
		t.Fatalf("Verify with no key: %v, want ErrInvalid naming the key", err)
	}
	otherKey, err := config.Sign([]byte(doc("2", 20)), []byte("another-key-0123456789abcdef012345"))
	if err != nil {
		t.Fatal(err)
	}
	for name, stored := range map[string]string{
		"unsigned":          doc("2", 20),
		"another key":       string(otherKey),
		"edited after sign": strings.Replace(signed, "limit: 10", "limit: 99", 1),
	} {
		client.Set(ctx, keys.Config, stored, 0)
		if _, err := config.LoadRedisVerified(ctx, client, keys, key); !errors.Is(err, config.ErrSignature) {
			t.Fatalf("%s: %v, want ErrSignature", name, err)
		}
	}
	// A watching instance with the key applies the signed version 3 and
	// not an unsigned version 4 written around push.
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("3", 30)), config.PublishOptions{SignKey: key, Force: true}); err != nil {
		t.Fatal(err)
	}
	initial, err := config.Parse([]byte(doc("0", 1)), "initial.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := config.NewHolder(initial)
	r, err := config.NewReloader(h, config.ReloaderOptions{VerifyKeys: [][]byte{key}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.WatchRedis(wctx, client, keys, 50*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the signed version to apply", func() bool { return limitOf(t, h) == 30 })
	client.Set(ctx, keys.Config, doc("4", 40), 0)
	time.Sleep(300 * time.Millisecond) // several polls
	if limitOf(t, h) != 30 {
		t.Fatal("an unsigned document was applied")
	}
}

// TestUnsignedDocumentIsRejectedNotUnreadable: a document in Redis that
// fails the signature check was read fine and refused, so it counts as
// result="invalid" (what RateLimitConfigRejected alerts on), once per
// document, with the "configuration rejected" log line, not as an
// unreadable source counted again at every poll.
func TestUnsignedDocumentIsRejectedNotUnreadable(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	keys, _ := config.KeysFor(fmt.Sprintf("unsigned%d", time.Now().UnixNano()))
	key := []byte("0123456789abcdef0123456789abcdef-sign")
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("1", 10)), config.PublishOptions{SignKey: key}); err != nil {
		t.Fatal(err)
	}
	initial, err := config.Parse([]byte(doc("0", 1)), "initial.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := config.NewHolder(initial)
	reg := prometheus.NewRegistry()
	var logs syncbuf.Buffer
	r, err := config.NewReloader(h, config.ReloaderOptions{VerifyKeys: [][]byte{key}, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.WatchRedis(wctx, client, keys, 20*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the signed version to apply", func() bool { return limitOf(t, h) == 10 })

	client.Set(ctx, keys.Config, doc("2", 20), 0)
	waitFor(t, "the unsigned document to count as invalid", func() bool { return reloads(t, reg, "invalid") == 1 })
	time.Sleep(200 * time.Millisecond) // ten polls of the same document
	if inv, e := reloads(t, reg, "invalid"), reloads(t, reg, "error"); inv != 1 || e != 0 {
		t.Fatalf("invalid %d, error %d after polling one unsigned document; want 1 and 0", inv, e)
	}
	if limitOf(t, h) != 10 {
		t.Fatal("the unsigned document was applied")
	}
	if !strings.Contains(logs.String(), "configuration rejected") {
		t.Fatalf("no rejection in the log:\n%s", logs.String())
	}
	// Signed again, it applies.
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("3", 30)), config.PublishOptions{SignKey: key, Force: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the signed version 3 to apply", func() bool { return limitOf(t, h) == 30 })
}

// TestPublishRedisUnreachable: a push that cannot reach Redis says so, and
// does not suggest --force, which is for a stored document too large to
// check (it used to say "the stored document cannot be checked (use
// --force to replace it)" for a refused connection or a wrong password).
func TestPublishRedisUnreachable(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, _ := config.KeysFor(fmt.Sprintf("pushdown%d", time.Now().UnixNano()))
	rs.Kill()
	for _, force := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := config.PublishWith(ctx, client, keys, []byte(doc("1", 10)), config.PublishOptions{Force: force})
		cancel()
		if err == nil || strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "reading") {
			t.Fatalf("push with Redis down (force %v): %v; want the failed read, without advice to use --force", force, err)
		}
	}
}

// TestPublishOverInvalidStoredDocument: a stored document that is not a
// valid versioned configuration (written by other means than push, and
// refused by every instance, which still run an older document) is
// replaced without Force only by a version at least the one it declares:
// a lower one, or any over a document declaring none, could roll the
// instances back unseen (push used to replace it, whatever the versions).
// TestRedisPublishAndWatch pushes version 4 over a broken "version: 3".
func TestPublishOverInvalidStoredDocument(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	for name, stored := range map[string]string{
		"invalid":         "version: \"9\"\npolicies: []\n",
		"invalid YAML":    "version: 9 # a comment\npolicies: [\n",
		"without version": doc("", 10),
	} {
		t.Run(name, func(t *testing.T) {
			keys, _ := config.KeysFor(fmt.Sprintf("pushinvalid%d", time.Now().UnixNano()))
			if err := client.Set(ctx, keys.Config, stored, 0).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := config.Publish(ctx, client, keys, []byte(doc("1", 10)))
			if err == nil || !strings.Contains(err.Error(), "--force") {
				t.Fatalf("push over a stored document that is %s: %v, want a refusal asking for --force", name, err)
			}
			if got, _ := client.Get(ctx, keys.Config).Result(); got != stored {
				t.Fatalf("the refused push changed the stored document to %q", got)
			}
			if _, err := config.PublishWith(ctx, client, keys, []byte(doc("1", 10)), config.PublishOptions{Force: true}); err != nil {
				t.Fatalf("forced push over a stored document that is %s: %v", name, err)
			}
		})
	}
}
