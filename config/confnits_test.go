package config_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestCheckNowEndsTheRejection: a SIGHUP (CheckNow) that finds the active
// document again after a rejected one logs "configuration source holds
// the active configuration again", as a poll does and
// docs/configuration.md says, once: a second SIGHUP finds it unchanged.
// A config walk found the SIGHUP logging only "configuration unchanged",
// the rejection's error line left without an end.
func TestCheckNowEndsTheRejection(t *testing.T) {
	const again = "configuration source holds the active configuration again"
	client := redistest.Start(t).Client(t)
	keys, err := config.KeysFor(fmt.Sprintf("ends%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, src := range []string{"file", "redis"} {
		t.Run(src, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "floodgate.yaml")
			put := func(data string) {
				if src == "file" {
					writeFile(t, path, data)
				} else if err := client.Set(ctx, keys.Config, data, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			put(doc("1", 10))
			h, r, reg, logs := newLoggedReloader(t, doc("1", 10))
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				// Polls an hour apart: only CheckNow reads.
				if src == "file" {
					r.WatchFile(wctx, path, time.Hour)
				} else {
					r.WatchRedis(wctx, client, keys, time.Hour)
				}
				close(done)
			}()
			t.Cleanup(func() { cancel(); <-done })
			r.CheckNow()
			waitFor(t, "the watcher running", func() bool { return strings.Contains(logs.String(), "configuration unchanged") })
			put("version: \"2\"\npolicies: [oops\n")
			r.CheckNow()
			waitFor(t, "the broken document rejected", func() bool { return reloads(t, reg, "invalid") >= 1 })
			put(doc("1", 10))
			mark := len(logs.String())
			r.CheckNow()
			outcome := func() string {
				s := logs.String()[mark:]
				for _, line := range []string{again, "configuration unchanged"} {
					if strings.Contains(s, line) {
						return line
					}
				}
				return ""
			}
			waitFor(t, "the SIGHUP's outcome", func() bool { return outcome() != "" })
			if got := outcome(); got != again || h.LastRejected() != nil {
				t.Fatalf("after the active document again: logged %q, rejected %v; want %q:\n%s", got, h.LastRejected(), again, logs)
			}
			mark = len(logs.String())
			r.CheckNow()
			waitFor(t, "the second SIGHUP's outcome", func() bool { return outcome() != "" })
			if got := outcome(); got != "configuration unchanged" {
				t.Fatalf("a second SIGHUP logged %q, want configuration unchanged (the end of the rejection once):\n%s", got, logs)
			}
			if a := reloads(t, reg, "applied"); a != 0 {
				t.Fatalf("applied %d: the active document must not be applied again", a)
			}
		})
	}
}

// TestLayerPolicyErrorsNameTheLayerOnce: a layer refused for its
// parameters together (the rate, burst × interval, a whole number of
// microseconds, a field of another algorithm, max_delay's range) names
// the layer once, not again as the policy "p.l" the library checks, and
// max_delay out of range names the field and its range as the other
// range errors do. A config walk found `layer "l" of policy "p": policy
// "p.l": max delay 312750h0m0s too long`.
func TestLayerPolicyErrorsNameTheLayerOnce(t *testing.T) {
	layer := func(fields string) string {
		return "version: 1\npolicies:\n  - name: p\n    layers:\n      - {name: l, dimension: user, " + fields + "}\n"
	}
	tiered := "version: 1\ntiers: [free, pro]\ndefault_tier: free\npolicies:\n  - name: p\n    tier_dimension: user\n    layers:\n" +
		"      - {name: l, dimension: user, algorithm: gcra, limit: 10, window: 1s, tiers: {pro: {max_delay: 312750h}}}\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"max_delay", layer("algorithm: gcra, limit: 10, window: 1s, max_delay: 312750h"),
			`layer "l" of policy "p": max_delay 312750h0m0s out of range 0s..13031d5h58m26.842624s`},
		{"tier max_delay", tiered,
			`layer "l" of policy "p" tier "pro": max_delay 312750h0m0s out of range 0s..13031d5h58m26.842624s`},
		{"rate", layer("algorithm: token_bucket, limit: 1099511627776, window: 1ms"),
			`layer "l" of policy "p": rate 1099511627776 per 1ms is finer than one unit per microsecond`},
		{"burst × interval", layer("algorithm: token_bucket, limit: 1, window: 400d, burst: 1099511627776"),
			`layer "l" of policy "p": burst 1099511627776 × interval 34560000000000µs is too long`},
		{"microseconds", layer("algorithm: gcra, limit: 10, window: 1.0005ms"),
			`layer "l" of policy "p": window 1.0005ms is not a whole number of microseconds`},
		{"burst", layer("algorithm: fixed_window, limit: 10, window: 1s, burst: 5"),
			`layer "l" of policy "p": burst applies to token_bucket and gcra only`},
		{"max_delay on token_bucket", layer("algorithm: token_bucket, limit: 10, window: 1s, max_delay: 1s"),
			`layer "l" of policy "p": max_delay applies to gcra only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.doc), "l.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, `policy "p.l"`) {
				t.Fatalf("error:\n%s\nwant it to say (naming the layer once):\n%s", msg, tc.want)
			}
		})
	}
}
