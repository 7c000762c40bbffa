package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/server"
)

const testToken = "s3cret-admin-token-0123456789abcdef"

// env is a running test service.
type env struct {
	t        *testing.T
	url      string
	holder   *config.Holder
	reloader *config.Reloader
	reg      *prometheus.Registry
	srv      *server.Server
	lim      *floodgate.Limiter
}

var prefixSeq atomic.Int64

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix(t *testing.T) string {
	return fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1_000_000_000, prefixSeq.Add(1))
}

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), t.Name()+".yaml")
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	return cfg
}

// start serves cfg over a real HTTP listener with store, and mutate tweaks
// the server options.
func start(t *testing.T, yaml string, store floodgate.Store, mutate func(*server.Options)) *env {
	t.Helper()
	holder, err := config.NewHolder(parse(t, yaml))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rl, err := config.NewReloader(holder, config.ReloaderOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(store, floodgate.Options{Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	opts := server.Options{Registerer: reg, AdminToken: testToken, DecisionTimeout: 5 * time.Second}
	if ms, ok := store.(*memstore.Store); ok {
		opts.Resetters = []server.Resetter{server.MemoryResetter{Store: ms}}
	}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := server.New(lim, holder, opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &env{t: t, url: hs.URL, holder: holder, reloader: rl, reg: reg, srv: srv, lim: lim}
}

func memStore(t *testing.T) *memstore.Store {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// redisStore starts a private redis-server and returns a store on it.
func redisStore(t *testing.T) (*redisstore.Store, *redistest.Server) {
	t.Helper()
	rs := redistest.Start(t)
	st, err := redisstore.New(rs.Client(t), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st, rs
}

// redisQuotaLeases returns the quota and lease stores on client, for
// server.Options' QuotaStore and ConcurrencyStore.
func redisQuotaLeases(t *testing.T, client redis.UniversalClient) (*quota.RedisStore, *concurrency.RedisStore) {
	t.Helper()
	qs, err := quota.NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := concurrency.NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	return qs, cs
}

// reply is an HTTP response read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(method, path, token string, body any) reply {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

func (e *env) post(path string, body any) reply { return e.do("POST", path, "", body) }

// check posts a check and decodes a 200/429 response.
func (e *env) check(policy string, id map[string]string, cost int64) server.CheckResponse {
	e.t.Helper()
	req := server.CheckRequest{Policy: policy, Identity: id}
	if cost != 0 {
		req.Cost = &cost
	}
	r := e.post("/v1/check", req)
	if r.status != 200 {
		e.t.Fatalf("check %s %v: status %d: %s", policy, id, r.status, r.body)
	}
	var resp server.CheckResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		e.t.Fatalf("decoding %s: %v", r.body, err)
	}
	return resp
}

func (e *env) peek(policy string, id map[string]string) server.CheckResponse {
	e.t.Helper()
	r := e.post("/v1/peek", server.PeekRequest{Policy: policy, Identity: id})
	if r.status != 200 {
		e.t.Fatalf("peek %s %v: status %d: %s", policy, id, r.status, r.body)
	}
	var resp server.CheckResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		e.t.Fatal(err)
	}
	return resp
}

func problemOf(t *testing.T, r reply) server.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d Content-Type %q, want application/problem+json; body %s", r.status, ct, r.body)
	}
	var p server.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("decoding problem %s: %v", r.body, err)
	}
	if p.Status != r.status || p.Detail == "" || !strings.HasPrefix(p.Type, server.ProblemTypePrefix) {
		t.Fatalf("malformed problem for status %d: %+v", r.status, p)
	}
	return p
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func id(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
