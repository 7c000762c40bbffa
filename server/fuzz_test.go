package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/concurrency"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/quota"
)

var fuzzSeeds = []string{
	`{"policy":"api","identity":{"user":"42"},"cost":1}`,
	`{"policy":"api","identity":{"user":"42","ip":"1.2.3.4"}}`,
	`{"policy":"login","identity":{"account":"a","ip":"::1"},"cost":3}`,
	`{"requests":[{"policy":"api","identity":{"user":"1"}},{"policy":"llm","identity":{"api_key":"k"},"cost":500}]}`,
	`{"policy":"api","identity":{"user":"42"},"cost":-1}`,
	`{"policy":"api","identity":{"user":42}}`,
	`{"policy":"api","identity":{"user":"42"},"cost":1e400}`,
	`{"policy":"api","identity":null,"cost":null}`,
	`{"policy":"api","identity":{"user":"\u0000{}:\n"}}`,
	`{"policy":"api"} {"policy":"api"}`,
	`{"requests":null}`,
	`[]`, `null`, `"x"`, ``, `{`, `{"a":`,
	`{"quota":"llm-tokens","identity":{"api_key":"k"},"cost":500}`,
	`{"quota":"llm-tokens","identity":{"api_key":"k"},"request_id":"job-1","estimate":4000}`,
	`{"quota":"llm-tokens","identity":{"api_key":"k"},"request_id":"job-1","actual":3120}`,
	`{"quota":"llm-tokens","identity":{"api_key":"k"},"request_id":"a b\u0000","estimate":-1}`,
	`{"quota":"llm-tokens","identity":{"api_key":"k"},"request_id":7,"actual":1e3}`,
	`{"quota":"api","identity":{"user":"42"}}`,
	`{"limiter":"reports","identity":{"user":"42"}}`,
	`{"limiter":"reports","identity":{"user":"42"},"lease_id":"KXGZ3V5LGWJ3QAWN7KAXMSQT6E"}`,
	`{"limiter":"reports","identity":{"user":"42"},"lease_id":""}`,
	`{"limiter":"llm-tokens","identity":{}}`,
}

// quotaDecoders and leaseDecoders are every quota and concurrency
// request decoder.
var (
	quotaDecoders = []func(*config.Config, []byte) (quotaOp, error){decodeQuotaCheck, decodeQuotaStatus, decodeQuotaReserve, decodeQuotaSettle}
	leaseDecoders = []func(*config.Config, []byte) (leaseOp, error){decodeAcquire, decodeLease}
)

// checkProblem asserts that err is a 4xx problem with a kind and detail.
func checkProblem(t *testing.T, err error) {
	t.Helper()
	p, ok := err.(*problemError)
	if !ok || p.status < 400 || p.status > 499 || p.detail == "" || p.kind == "" {
		t.Fatalf("error %T %v is not a 4xx problem", err, err)
	}
}

// checkQuotaOp asserts what decoding promises about a quota request.
func checkQuotaOp(t *testing.T, cfg *config.Config, op quotaOp) {
	t.Helper()
	if q, ok := cfg.Quota(op.quota.Name); !ok || q != op.quota {
		t.Fatalf("accepted unknown quota %q", op.quota.Name)
	}
	if id, err := op.quota.Identity(op.values); err != nil || id != op.identity || id == "" {
		t.Fatalf("accepted identity %q: %v", op.identity, err)
	}
	if op.amount < 0 || op.amount > floodgate.MaxCost || len(op.id) > quota.MaxRequestIDLen {
		t.Fatalf("accepted amount %d, request id %q", op.amount, op.id)
	}
}

func fuzzConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// quotaPaths are the quota and concurrency endpoints the handler fuzz
// drives.
var quotaPaths = []string{
	"/v1/quota/check", "/v1/quota/status", "/v1/quota/reserve", "/v1/quota/settle",
	"/v1/concurrency/acquire", "/v1/concurrency/release", "/v1/concurrency/renew",
}

// checkValid asserts what decoding promises about an accepted request.
func checkValid(t *testing.T, cfg *config.Config, c check) {
	t.Helper()
	if p, ok := cfg.Policy(c.policy.Name); !ok || p != c.policy {
		t.Fatalf("accepted unknown policy %q", c.policy.Name)
	}
	if c.peek != (c.cost == 0) || c.cost < 0 || c.cost > floodgate.MaxCost {
		t.Fatalf("accepted cost %d (peek %v)", c.cost, c.peek)
	}
	if _, err := cfg.Specs(c.policy, "", c.identity, c.peek); err != nil {
		t.Fatalf("accepted a request whose layers cannot be built: %v", err)
	}
}

// FuzzDecodeCheck: any body either decodes to a request every layer can be
// built from, or fails with a 4xx problem; it never panics.
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	cfg := fuzzConfig(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, decode := range []func(*config.Config, []byte) (check, error){decodeCheck, decodePeek} {
			c, err := decode(cfg, body)
			if err != nil {
				p, ok := err.(*problemError)
				if !ok || p.status < 400 || p.status > 499 || p.detail == "" || p.kind == "" {
					t.Fatalf("error %T %v is not a 4xx problem", err, err)
				}
				continue
			}
			checkValid(t, cfg, c)
		}
		for _, decode := range quotaDecoders {
			if op, err := decode(cfg, body); err != nil {
				checkProblem(t, err)
			} else {
				checkQuotaOp(t, cfg, op)
			}
		}
		for _, decode := range leaseDecoders {
			op, err := decode(cfg, body)
			if err != nil {
				checkProblem(t, err)
				continue
			}
			if l, ok := cfg.ConcurrencyLimit(op.limit.Name); !ok || l != op.limit || len(op.leaseID) > concurrency.MaxLeaseIDLen {
				t.Fatalf("accepted limiter %q lease %q", op.limit.Name, op.leaseID)
			}
			if id, err := op.limit.Identity(op.values); err != nil || id != op.identity {
				t.Fatalf("accepted identity %q: %v", op.identity, err)
			}
		}
		cs, err := decodeBatch(cfg, body, 10)
		if err != nil {
			if _, ok := err.(*problemError); !ok {
				t.Fatalf("batch error %T %v is not a problem", err, err)
			}
			return
		}
		if len(cs) == 0 || len(cs) > 10 {
			t.Fatalf("accepted a batch of %d", len(cs))
		}
		for _, c := range cs {
			checkValid(t, cfg, c)
		}
	})
}

// FuzzHandler drives the whole handler: every answer is a decision (200) or
// a problem+json 4xx, never a 5xx or a panic.
func FuzzHandler(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add("/v1/check", []byte(s))
		f.Add("/v1/check/batch", []byte(s))
	}
	f.Add("/v1/peek", []byte(`{"policy":"downstream","identity":{"route":"/x"}}`))
	for _, path := range quotaPaths {
		for _, s := range fuzzSeeds[len(fuzzSeeds)-10:] {
			f.Add(path, []byte(s))
		}
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	holder, err := config.NewHolder(fuzzConfig(f))
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(lim, holder, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		switch path {
		case "/v1/check", "/v1/check/batch", "/v1/peek":
		default:
			if !slices.Contains(quotaPaths, path) {
				return
			}
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body))))
		switch {
		case rec.Code == http.StatusOK:
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("200 with invalid JSON %q", rec.Body.String())
			}
		case rec.Code >= 400 && rec.Code < 500:
			var p Problem
			if rec.Header().Get("Content-Type") != "application/problem+json" || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Detail == "" {
				t.Fatalf("%d without a problem body: %q", rec.Code, rec.Body.String())
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	})
}
