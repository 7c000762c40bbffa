package envoyrls

import (
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestDegradedAnswersSaySo serves through a fallback.Store over a private
// redis-server, kills it, and checks that the answers decided by the
// failure mode carry the degraded header and dynamic metadata, and that
// Redis's own answers carry neither (before the kill and after a restart).
// Options.OnDegraded is called once for each degraded answer, with its
// mode, and never for Redis's.
func TestDegradedAnswersSaySo(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode fallback.Mode
		each bool
		code rlspb.RateLimitResponse_Code
	}{
		{"local", fallback.ModeLocal, false, ok},
		{"closed-each", fallback.ModeClosed, true, rlspb.RateLimitResponse_OVER_LIMIT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			primary, err := redisstore.New(srv.Client(t), redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			local, err := memstore.New(memstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// A generous budget: a loaded machine must not make healthy
			// Redis calls look degraded.
			fb, err := fallback.New(primary, local, fallback.Options{DefaultMode: tc.mode, Budget: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(fb.Close)
			var mu sync.Mutex
			var calls []fallback.Outcome // OnDegraded's
			onDegraded := func() []fallback.Outcome {
				mu.Lock()
				defer mu.Unlock()
				return append([]fallback.Outcome(nil), calls...)
			}
			r := newRig(t, fb, apiConfig, Options{CountEachDescriptor: tc.each, OnDegraded: func(o fallback.Outcome) {
				mu.Lock()
				calls = append(calls, o)
				mu.Unlock()
			}})
			req := func() *rlspb.RateLimitRequest {
				return request("api", desc("user=kim"), desc("tenant=acme"))
			}

			resp := r.call(t, req())
			wantStatus(t, "healthy", resp.GetStatuses()[0], ok, 2, 3)
			wantNotDegraded(t, "healthy", resp)
			if got := onDegraded(); len(got) != 0 {
				t.Errorf("healthy: OnDegraded calls %+v, want none", got)
			}

			srv.Kill()
			resp = r.call(t, req())
			if got := onDegraded(); len(got) != 1 || !got[0].Degraded || got[0].Mode != tc.mode {
				t.Errorf("redis down: OnDegraded calls %+v, want one with mode %s", got, tc.mode)
			}
			if resp.GetOverallCode() != tc.code {
				t.Errorf("redis down: overall %v, want %v", resp.GetOverallCode(), tc.code)
			}
			v := headers(resp)["X-Floodgate-Degraded"]
			if !strings.HasPrefix(v, tc.mode.String()+"; reason=") || strings.HasSuffix(v, "=none") {
				t.Errorf("redis down: X-Floodgate-Degraded %q, want %q", v, tc.mode.String()+"; reason=...")
			}
			md := resp.GetDynamicMetadata().GetFields()
			if !md["degraded"].GetBoolValue() || md["failure_mode"].GetStringValue() != tc.mode.String() ||
				"reason="+md["degraded_reason"].GetStringValue() != strings.TrimPrefix(v, tc.mode.String()+"; ") {
				t.Errorf("redis down: dynamic_metadata %v, want degraded true, failure_mode %s and the header's reason", resp.GetDynamicMetadata(), tc.mode)
			}

			srv.Restart(t)
			degradedAnswers := 1 // the one above
			deadline := time.Now().Add(60 * time.Second)
			for {
				resp = r.call(t, req())
				if _, d := headers(resp)["X-Floodgate-Degraded"]; !d {
					break
				}
				degradedAnswers++
				if time.Now().After(deadline) {
					t.Fatalf("still degraded 60 s after Redis restarted: %v", resp)
				}
				time.Sleep(100 * time.Millisecond)
			}
			wantNotDegraded(t, "restarted", resp)
			if got := onDegraded(); len(got) != degradedAnswers {
				t.Errorf("restarted: OnDegraded called %d times, want %d (once per degraded answer)", len(got), degradedAnswers)
			}
		})
	}
}

func wantNotDegraded(t *testing.T, what string, resp *rlspb.RateLimitResponse) {
	t.Helper()
	if len(resp.GetResponseHeadersToAdd()) != 0 || resp.GetDynamicMetadata() != nil {
		t.Errorf("%s: headers %v, dynamic_metadata %v, want none", what, resp.GetResponseHeadersToAdd(), resp.GetDynamicMetadata())
	}
}

// TestDegradedHeaderName checks the header's rename and its validation.
func TestDegradedHeaderName(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(st, st, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	r := newRig(t, fb, apiConfig, Options{DegradedHeader: "X-Fallback"})
	if got := r.svc.opts.DegradedHeader; got != "X-Fallback" {
		t.Errorf("DegradedHeader %q", got)
	}
	wantNotDegraded(t, "memory primary", r.call(t, request("api", desc("user=kim"))))
	if _, err := NewService(r.svc.lim, r.cfg.Load, Options{DegradedHeader: "bad header"}); err == nil {
		t.Error("DegradedHeader \"bad header\" accepted")
	}
}
