package server

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memstore"
)

// fastCheckServer is a Server on memstore with one policy that never
// denies, and its fasthttp handler; mutate, if any, changes its options.
func fastCheckServer(tb testing.TB, mutate ...func(*Options)) (*Server, fasthttp.RequestHandler) {
	tb.Helper()
	cfg, err := config.Parse([]byte(`
version: "1"
policies:
  - name: api
    layers:
      - name: per-user
        algorithm: sliding_window
        limit: 1_000_000_000
        window: 1m
        dimension: user
`), "fast.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	holder, err := config.NewHolder(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "fast"})
	if err != nil {
		tb.Fatal(err)
	}
	opts := Options{Registerer: prometheus.NewRegistry()}
	for _, m := range mutate {
		m(&opts)
	}
	srv, err := New(lim, holder, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return srv, srv.fastHandler()
}

// fastCheck sends body to h as POST /v1/check on a RequestCtx reused as
// fasthttp reuses it between the requests of a connection.
func fastCheck(tb testing.TB, h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx, body []byte) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.SetRequestURI("/v1/check")
	ctx.Request.Header.SetHost("floodgate.internal:8080")
	ctx.Request.SetBody(body)
	h(ctx)
	if ctx.Response.StatusCode() != fasthttp.StatusOK {
		tb.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestFastCheckAnswerAllocates checks that the fasthttp engine writes a
// check's answer into the response's own buffer: a check through its
// handler allocates no more than deciding it alone does (decideOne: the
// body's decoding, the decision, metrics). Appending the answer to a
// fresh buffer grew it about seven times per check.
func TestFastCheckAnswerAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	srv, h := fastCheckServer(t)
	var ctx fasthttp.RequestCtx
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = []byte(`{"policy":"api","identity":{"user":"u` + strconv.Itoa(i) + `"},"cost":1}`)
	}
	for _, b := range bodies {
		fastCheck(t, h, &ctx, b) // every key exists from here on
	}
	want := `{"allowed":true,"policy":"api","tier":"default","limit":1000000000,"remaining":`
	if got := string(ctx.Response.Body()); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "}\n") {
		t.Fatalf("answer %q", got)
	}
	i := 0
	handler := testing.AllocsPerRun(200, func() {
		fastCheck(t, h, &ctx, bodies[i%len(bodies)])
		i++
	})
	var layers [4]LayerResult
	decide := testing.AllocsPerRun(200, func() {
		if _, _, err := srv.decideOne(context.Background(), bodies[i%len(bodies)], "", "/v1/check", decodeCheck, layers[:]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	t.Logf("allocations per check: %.1f through the fasthttp handler, %.1f deciding alone", handler, decide)
	if handler > decide {
		t.Errorf("a check through the fasthttp handler allocates %.1f times, deciding it alone %.1f: the answer allocates", handler, decide)
	}
}

// BenchmarkFastCheck measures POST /v1/check on the fasthttp engine's
// handler (no sockets): decoding, the decision on memstore, metrics and
// the JSON answer.
func BenchmarkFastCheck(b *testing.B) {
	_, h := fastCheckServer(b)
	var ctx fasthttp.RequestCtx
	bodies := make([][]byte, 10_000)
	for i := range bodies {
		bodies[i] = []byte(`{"policy":"api","identity":{"user":"u` + strconv.Itoa(i) + `"},"cost":1}`)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		fastCheck(b, h, &ctx, bodies[i%len(bodies)])
		i++
	}
}

// BenchmarkFastCheckAllowedHost is BenchmarkFastCheck with
// Options.AllowedHosts, the request's Host the last name listed.
func BenchmarkFastCheckAllowedHost(b *testing.B) {
	_, h := fastCheckServer(b, func(o *Options) {
		o.AllowedHosts = []string{"floodgate.example.com", "*.floodgate.example.net", "floodgate.internal"}
	})
	var ctx fasthttp.RequestCtx
	bodies := make([][]byte, 10_000)
	for i := range bodies {
		bodies[i] = []byte(`{"policy":"api","identity":{"user":"u` + strconv.Itoa(i) + `"},"cost":1}`)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		fastCheck(b, h, &ctx, bodies[i%len(bodies)])
		i++
	}
}
