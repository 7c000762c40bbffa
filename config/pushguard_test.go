package config_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestPublishSignedUnderAnotherKey: a push signed with one key over a
// document signed with another is refused unless forced (it used to be
// published: instances verifying with the old key refused it and stayed
// on the old version while the others applied it, the fleet split).
func TestPublishSignedUnderAnotherKey(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	keys, _ := config.KeysFor(fmt.Sprintf("rekey%d", time.Now().UnixNano()))
	good := []byte("0123456789abcdef0123456789abcdef-good")
	bad := []byte("0123456789abcdef0123456789abcdef-bad!")
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("8", 8)), config.PublishOptions{SignKey: good}); err != nil {
		t.Fatal(err)
	}
	_, err := config.PublishWith(ctx, client, keys, []byte(doc("9", 9)), config.PublishOptions{SignKey: bad})
	if !errors.Is(err, config.ErrSignature) || !strings.Contains(err.Error(), "signed under another key") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("push signed with another key: %v, want ErrSignature naming the other key and --force", err)
	}
	if _, err := config.LoadRedisVerified(ctx, client, keys, good); err != nil {
		t.Fatalf("after the refused push, the stored document does not verify with the good key: %v", err)
	}
	// The same key goes through; a key rotation takes --force.
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("9", 9)), config.PublishOptions{SignKey: good}); err != nil {
		t.Fatalf("push signed with the same key: %v", err)
	}
	if _, err := config.PublishWith(ctx, client, keys, []byte(doc("10", 10)), config.PublishOptions{SignKey: bad, Force: true}); err != nil {
		t.Fatalf("forced push signed with a new key: %v", err)
	}
	if _, err := config.LoadRedisVerified(ctx, client, keys, bad); err != nil {
		t.Fatalf("after the forced push: %v", err)
	}
}

// TestVersionRegressionIsWarned: a document from Redis whose version is
// lower than the active one (Redis restored from an older snapshot,
// wiped and pushed to again, a forced rollback) is applied, but logged at
// WARN naming both versions and counted in
// floodgate_config_version_regressions_total, at 0 from the start (it
// used to be an INFO "configuration applied" like any other).
func TestVersionRegressionIsWarned(t *testing.T) {
	_, r, reg, logs := newLoggedReloader(t, doc("506", 6))
	if got := regressions(t, reg); got != 0 {
		t.Fatalf("regressions at start: %v, want 0", got)
	}
	if _, err := r.ApplyVersioned([]byte(doc("507", 7)), "redis:fg:config"); err != nil {
		t.Fatal(err)
	}
	if got := regressions(t, reg); got != 0 || strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("a newer version: %v regressions, log:\n%s", got, logs.String())
	}
	for i, v := range []string{"505", "0505"} { // lower, then equal in natural order
		c, err := r.ApplyVersioned([]byte(doc(v, 5+i)), "redis:fg:config")
		if err != nil || c.Version() != v {
			t.Fatalf("version %s: %v; a lower version must still apply", v, err)
		}
		if got := regressions(t, reg); got != float64(i+1) {
			t.Fatalf("after version %s: %v regressions, want %d", v, got, i+1)
		}
	}
	out := logs.String()
	for _, want := range []string{`level=WARN msg="configuration applied: the version is not newer than the previous one"`,
		`config_version=505 previous_config_version=507`, "restored from an older snapshot", "wiped", "rollback"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q:\n%s", want, out)
		}
	}
	// A configuration file has no such rule: Apply does not count.
	if _, err := r.Apply([]byte(doc("1", 1)), "floodgate.yaml"); err != nil {
		t.Fatal(err)
	}
	if got := regressions(t, reg); got != 2 {
		t.Fatalf("after a file's lower version: %v regressions, want 2", got)
	}
}

func regressions(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "floodgate_config_version_regressions_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// TestSignatureTakesItOverTheLimit: a file just under MaxSize is valid,
// and signed it is not; the refusal says the signature line did it (it
// said only "document is 1048660 bytes (max 1048576)", of a file config
// validate had passed). SignedLen says so beforehand.
func TestSignatureTakesItOverTheLimit(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, _ := config.KeysFor(fmt.Sprintf("bigsign%d", time.Now().UnixNano()))
	key := []byte("0123456789abcdef0123456789abcdef-sign")
	base := doc("1", 1)
	data := []byte(base + "#" + strings.Repeat("x", config.MaxSize-16-len(base)-2) + "\n")
	if len(data) != config.MaxSize-16 {
		t.Fatalf("document of %d bytes", len(data))
	}
	if _, err := config.Parse(data, "big.yaml"); err != nil {
		t.Fatal(err)
	}
	signed, err := config.Sign(data, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := config.SignedLen(data); n != len(signed) {
		t.Fatalf("SignedLen %d, Sign gave %d bytes", n, len(signed))
	}
	if n := config.SignedLen(signed); n != len(signed) {
		t.Fatalf("SignedLen of a signed document %d, want %d", n, len(signed))
	}
	_, err = config.PublishWith(context.Background(), client, keys, data, config.PublishOptions{SignKey: key})
	want := fmt.Sprintf("signed, the document is %d bytes (max %d): the signature line adds %d bytes", len(signed), config.MaxSize, len(signed)-len(data))
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("signed push of %d bytes: %v, want %q", len(data), err, want)
	}
}

// TestSameVersionSpacingOnly: a document of the active version that
// differs only in its final newline (redis-cli set KEY "$(cat FILE)") or
// its signature line is still refused (the hash is the document's
// identity across the fleet), and the refusal says what differs (it said
// only "already active with different content", though the signature
// verified).
func TestSameVersionSpacingOnly(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef-sign")
	signed, err := config.Sign([]byte(doc("500", 5)), key)
	if err != nil {
		t.Fatal(err)
	}
	_, r, _, _ := newLoggedReloader(t, string(signed))
	other, err := config.Sign([]byte(doc("500", 5)), []byte("0123456789abcdef0123456789abcdef-other"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"without the final newline", strings.TrimSuffix(string(signed), "\n"), "only in spacing or line ends"},
		{"with CR LF", strings.ReplaceAll(string(signed), "\n", "\r\n"), "only in spacing or line ends"},
		{"signed under another key", string(other), "the same content under another signature line"},
		{"unsigned", doc("500", 5), "the same content under another signature line"},
		{"other content", doc("500", 6), "different content; bump the version"},
	} {
		if err := config.Verify([]byte(c.doc), key); c.name == "without the final newline" && err != nil {
			t.Fatalf("%s: the signature does not verify: %v", c.name, err)
		}
		_, err := r.ApplyVersioned([]byte(c.doc), "redis:fg:config")
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want a refusal saying %q", c.name, err, c.want)
		}
	}
}
