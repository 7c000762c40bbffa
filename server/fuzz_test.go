package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memstore"
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
}

func fuzzConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
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
			return
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
