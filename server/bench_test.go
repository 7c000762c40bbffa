package server_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/server"
)

// benchYAML is the policy of the service benchmarks: one layer, every
// decision allowed (as in docs/benchmarks.md's service runs).
const benchYAML = `
version: "1"
policies:
  - name: api
    layers:
      - name: per-user
        algorithm: sliding_window
        limit: 1_000_000_000
        window: 1m
        dimension: user
`

func benchServer(b *testing.B) *server.Server {
	b.Helper()
	cfg, err := config.Parse([]byte(benchYAML), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	holder, err := config.NewHolder(cfg)
	if err != nil {
		b.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(lim, holder, server.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	return srv
}

// benchBodies returns one POST /v1/check body per identity.
func benchBodies() [][]byte {
	bodies := make([][]byte, 10_000)
	for i := range bodies {
		bodies[i] = []byte(`{"policy":"api","identity":{"user":"u` + strconv.Itoa(i) + `"},"cost":1}`)
	}
	return bodies
}

// discardWriter is a ResponseWriter that keeps nothing but the status.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// BenchmarkCheck measures POST /v1/check on the in-memory store:
// "handler" calls the Server's handler directly (its own cost: decoding,
// the decision, metrics, the JSON answer), "http" goes through a real
// HTTP server and keep-alive clients on a loopback listener, with
// parallel callers (allocations there count the client's too).
func BenchmarkCheck(b *testing.B) {
	bodies := benchBodies()
	b.Run("handler", func(b *testing.B) {
		srv := benchServer(b)
		w := &discardWriter{h: http.Header{}}
		r := httptest.NewRequest(http.MethodPost, "/v1/check?enforce=1", nil)
		rd := bytes.NewReader(nil)
		body := io.NopCloser(rd)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			rd.Reset(bodies[i%len(bodies)])
			r.Body = body
			clear(w.h)
			srv.ServeHTTP(w, r)
			if w.status != http.StatusOK {
				b.Fatalf("status %d", w.status)
			}
			i++
		}
	})
	b.Run("http", func(b *testing.B) {
		ts := httptest.NewServer(benchServer(b))
		b.Cleanup(ts.Close)
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		b.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr}
		url := ts.URL + "/v1/check?enforce=1"
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8) // 8 callers per CPU
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := client.Post(url, "application/json", bytes.NewReader(bodies[next.Add(1)%int64(len(bodies))]))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	})
}
