package config_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestRespacedRefusalSaysRestart: an instance started on a document
// stored around push (redis-cli set, the final newline dropped) refuses
// the file floodgate config push then stores under the same version, and
// its refusal says what makes it take it: a restart, or a new version. It
// said only to store the file with floodgate config push FILE, which was
// what had just been done, and doing it again changed nothing (a
// new-user walk).
func TestRespacedRefusalSaysRestart(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client(t)
	keys, err := config.KeysFor(fmt.Sprintf("respaced%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	file := doc("3", 10)
	if err := client.Set(ctx, keys.Config, strings.TrimSuffix(file, "\n"), 0).Err(); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadRedis(ctx, client, keys)
	if err != nil {
		t.Fatal(err)
	}
	h, err := config.NewHolder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := config.NewReloader(h, config.ReloaderOptions{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.WatchRedis(wctx, client, keys, 50*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	if _, err := config.Publish(ctx, client, keys, []byte(file)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pushed file to be refused", func() bool { return h.LastRejected() != nil })
	got := h.LastRejected().Error
	for _, want := range []string{`version "3" is already active with content that differs from this document only in spacing or line ends`,
		"If floodgate config push stored this document, this instance runs another copy", "restart it to take this one", "Or bump the version"} {
		if !strings.Contains(got, want) {
			t.Errorf("refusal %q does not say %q", got, want)
		}
	}
}
