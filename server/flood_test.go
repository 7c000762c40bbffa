package server_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/server"
)

// TestBatchFloodOfLoginIdentities reproduces the "store full" attack on the
// service in memory mode: batches of 100 unique login identities (account
// and IP) fill the memory store far past its bound. On the old store every
// later decision that needed a new key (a new account, the next window of
// the api policy's global edge layer) failed with 503 "store full". Now the
// store evicts one-off identities: no decision fails, and identities decided
// before the flood keep their exact counts.
func TestBatchFloodOfLoginIdentities(t *testing.T) {
	st, err := memstore.New(memstore.Options{Shards: 4, MaxKeys: 400})
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, string(config.DefaultYAML()), st, nil)
	alice := id("account", "alice", "ip", "192.0.2.1")
	for range 2 {
		if r := e.check("login", alice, 0); !r.Allowed {
			t.Fatalf("alice before the flood: %+v", r)
		}
	}
	user := id("user", "42")
	for range 2 {
		if r := e.check("api", user, 0); !r.Allowed {
			t.Fatalf("user 42 before the flood: %+v", r)
		}
	}
	n := 0
	for b := range 50 { // 5,000 new accounts and IPs: 25 times the bound
		var req server.BatchRequest
		for range 100 {
			n++
			req.Requests = append(req.Requests, server.CheckRequest{Policy: "login",
				Identity: id("account", fmt.Sprint("junk-", n), "ip", fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255))})
		}
		r := e.post("/v1/check/batch", req)
		if r.status != 200 {
			t.Fatalf("batch %d: status %d: %s", b, r.status, r.body)
		}
		var resp server.BatchResponse
		if err := json.Unmarshal(r.body, &resp); err != nil {
			t.Fatal(err)
		}
		for i, it := range resp.Results {
			if it.Error != nil || !it.Allowed {
				t.Fatalf("batch %d item %d: %+v %+v", b, i, it.CheckResponse, it.Error)
			}
		}
	}
	if st.Len() > 400+8 || st.Evictions() == 0 {
		t.Fatalf("store holds %d identities (bound 400), %d evictions", st.Len(), st.Evictions())
	}
	// Alice's two attempts are still counted: three left, then denied.
	for want := int64(2); want >= 0; want-- {
		if r := e.check("login", alice, 0); !r.Allowed || r.Remaining != want {
			t.Fatalf("alice after the flood: %+v, want allowed with %d left", r, want)
		}
	}
	if r := e.check("login", alice, 0); r.Allowed {
		t.Fatalf("alice past her limit after the flood: %+v", r)
	}
	// User 42's per-user layer kept its count (100 a minute, 2 used): 97
	// left after this third check, or 98 when the minute turned during the
	// test (the sliding window then weighs the first two a little less
	// than whole); an evicted count would leave 99. The edge layer may have
	// rolled into a new minute, a key stored anew.
	if r := e.check("api", user, 0); !r.Allowed || r.Layers[1].Remaining < 97 || r.Layers[1].Remaining > 98 {
		t.Fatalf("user 42 after the flood: %+v, want per-user remaining 97 (98 across a minute's turn)", r)
	}
	// A new identity on every policy is decided, not refused.
	if r := e.check("login", id("account", "newcomer", "ip", "192.0.2.9"), 0); !r.Allowed {
		t.Fatalf("newcomer: %+v", r)
	}
}
