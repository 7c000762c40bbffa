package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// TestResetAtIsReset checks that a check's "reset_at" names the same
// instant as its "reset" (and the X-RateLimit-Reset header), for the
// binding layer and every layer, on both HTTP engines, when the reset
// falls inside a second: a full token bucket is fresh again now, and
// "now" here is half a second past a whole second. "reset" is rounded up
// to the next second; "reset_at" used to be the same time rounded down,
// one second earlier than "reset".
func TestResetAtIsReset(t *testing.T) {
	const yaml = `
policies:
  - name: p
    layers:
      - {name: bucket, algorithm: token_bucket, limit: 10, window: 1s, dimension: user}
      - {name: minute, algorithm: fixed_window, limit: 100, window: 1m, dimension: user}
`
	clock := func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 500_000_000, time.UTC) }
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		t.Run(string(engine), func(t *testing.T) {
			holder, err := config.NewHolder(parse(t, yaml))
			if err != nil {
				t.Fatal(err)
			}
			lim, err := floodgate.New(memStore(t), floodgate.Options{Prefix: uniquePrefix(t), Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := server.New(lim, holder, server.Options{Registerer: prometheus.NewRegistry(),
				DecisionTimeout: 5 * time.Second, Clock: clock, HTTPEngine: engine})
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, ln) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Serve: %v", err)
				}
			})
			for _, path := range []string{"/v1/peek", "/v1/check"} {
				resp, err := http.Post("http://"+ln.Addr().String()+path, "application/json",
					strings.NewReader(`{"policy":"p","identity":{"user":"u"}}`))
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %d %s %v", path, resp.StatusCode, body, err)
				}
				var got struct {
					Binding string `json:"binding"`
					Reset   int64  `json:"reset"`
					ResetAt string `json:"reset_at"`
					Layers  []struct {
						Name    string `json:"name"`
						Reset   int64  `json:"reset"`
						ResetAt string `json:"reset_at"`
					} `json:"layers"`
				}
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatalf("%s: %v: %s", path, err, body)
				}
				if got.Binding != "bucket" {
					t.Fatalf("%s: binding %q, want bucket (the test needs it): %s", path, got.Binding, body)
				}
				want := time.Unix(got.Reset, 0).UTC().Format(time.RFC3339)
				if got.ResetAt != want || resp.Header.Get("X-RateLimit-Reset") != strconv.FormatInt(got.Reset, 10) {
					t.Errorf("%s: reset %d (header %s), reset_at %q: want reset_at %q", path, got.Reset,
						resp.Header.Get("X-RateLimit-Reset"), got.ResetAt, want)
				}
				if got.Reset != 1893553446 {
					t.Errorf("%s: reset %d, want 1893553446 (03:04:05.5 rounded up)", path, got.Reset)
				}
				for _, l := range got.Layers {
					if w := time.Unix(l.Reset, 0).UTC().Format(time.RFC3339); l.ResetAt != w {
						t.Errorf("%s: layer %s: reset %d, reset_at %q: want %q", path, l.Name, l.Reset, l.ResetAt, w)
					}
				}
			}
		})
	}
}
