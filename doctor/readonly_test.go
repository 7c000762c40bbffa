package doctor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestCounterRefusesWrites(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	k := &counter{}
	k.attach(c)
	ctx := context.Background()
	for name, cmd := range map[string]redis.Cmder{
		"SET":        c.Set(ctx, "w:set", "1", 0),
		"DEL":        c.Del(ctx, "w:x"),
		"EXPIRE":     c.Expire(ctx, "w:x", time.Second),
		"FLUSHALL":   c.FlushAll(ctx),
		"CONFIG SET": c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru"),
		// Scripts other than doctor's probe: the guard let any through.
		"EVAL":        c.Eval(ctx, "return redis.call('SET', KEYS[1], '1')", []string{"w:eval"}),
		"EVALSHA":     c.EvalSha(ctx, "0123456789012345678901234567890123456789", []string{"w:x"}),
		"SCRIPT LOAD": c.ScriptLoad(ctx, "return redis.call('DEL', KEYS[1])"),
	} {
		if !errors.Is(cmd.Err(), ErrRefused) {
			t.Errorf("%s: error %v, want ErrRefused", name, cmd.Err())
		}
	}
	pipe := c.Pipeline()
	pipe.PTTL(ctx, "w:x")
	pipe.Set(ctx, "w:pipe", "1", 0)
	if _, err := pipe.Exec(ctx); !errors.Is(err, ErrRefused) {
		t.Errorf("pipeline with a SET: %v, want ErrRefused", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING refused: %v", err)
	}
	// Nothing reached the server.
	plain := srv.Client(t)
	if err := probeScript.Run(ctx, c, []string{"w:probe"}).Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("the probe script refused: %v", err)
	}
	if n := plain.Exists(ctx, "w:set", "w:pipe", "w:eval").Val(); n != 0 {
		t.Fatalf("%d refused keys were written", n)
	}
	if p := plain.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]; p != "noeviction" {
		t.Fatalf("maxmemory-policy became %q", p)
	}
	if k.n.Load() == 0 {
		t.Fatal("the allowed commands were not counted")
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key   string
		kind  keyKind
		owner string
		alg   string
	}{
		{"fg:config", kindConfig, "", ""},
		{"fg:tiers", kindTiers, "", ""},
		{"fg:probe", kindProbe, "", ""},
		{"fg:probe:{1234}", kindProbe, "", ""},
		{"fg:probe:{}", kindUnknown, "", ""},
		{"fg:probe:{12a}", kindUnknown, "", ""},
		{"fg:instances", kindFleet, "", ""},
		{"fg:api.per-user:sw:{ruser42}", kindRate, "api.per-user", "sw"},
		{"fg:api.edge:fw:{rglobal/3}", kindRate, "api.edge", "fw"},
		{"fg:login.per-account:sl:{h0123456789abcdef0123456789abcdef}", kindRate, "login.per-account", "sl"},
		{"fg:api.monthly:qt:{ruser42}:m2026-12", kindQuotaLayer, "api.monthly", "qt"},
		{"fg:llm-tokens:q:{rk1}:m2026-12:u", kindBilling, "llm-tokens", "q"},
		{"fg:llm-tokens:q:{rk1}:m2026-12:h", kindBilling, "llm-tokens", "q"},
		{"fg:reports:cc:{ru1}", kindLease, "reports", "cc"},
		{"fg:api.per-user:sw:{ruser42}:rel:1f3a", kindMarker, "api.per-user", "sw"},
		{"fg:api.per-user:tb:{ruser42}:rq", kindJournal, "api.per-user", "tb"},
		{"fg:api.edge:gc:{rglobal}:rq", kindJournal, "api.edge", "gc"},
		{"fg:api.per-user:sw:{ruser42}:rq", kindUnknown, "", ""},
		{"{login}:a:3f9c", kindLogin, "login guard a", ""},
		{"fg:naive:{rk}", kindDemo, "naive", ""},
		{"fg:session:abc", kindUnknown, "", ""},
		{"fg:api.per-user:sw:{ruser42}:extra", kindUnknown, "", ""},
		{"fg:api.per-user:zz:{ruser42}", kindUnknown, "", ""},
		{"fg:x:q:{rk}:m2026-12:z", kindUnknown, "", ""},
		{"fg:{", kindUnknown, "", ""},
		{"fg:a:fw:{}", kindUnknown, "", ""},
		{"other:api.per-user:sw:{ru}", kindUnknown, "", ""},
		{"{login}:zz", kindUnknown, "", ""},
	} {
		p := parseKey("fg", "login", tc.key)
		if p.kind != tc.kind || p.owner != tc.owner || p.alg != tc.alg {
			t.Errorf("parseKey(%q) = %+v, want kind %d owner %q alg %q", tc.key, p, tc.kind, tc.owner, tc.alg)
		}
	}
}

func TestMissingSlots(t *testing.T) {
	got := missingSlots([]slotRange{{0, 5460}, {5461, 10922}, {11001, 16383}})
	if len(got) != 1 || got[0] != (slotRange{10923, 11000}) {
		t.Fatalf("missingSlots = %v", got)
	}
	if got := missingSlots([]slotRange{{0, 16383}}); len(got) != 0 {
		t.Fatalf("full coverage: %v", got)
	}
	if got := missingSlots(nil); len(got) != 1 || got[0] != (slotRange{0, 16383}) {
		t.Fatalf("no coverage: %v", got)
	}
}
