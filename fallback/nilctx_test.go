package fallback_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestNilContext: Decide, Call and CallWrite given a nil context return
// an error wrapping floodgate.ErrNilContext, call nothing and count
// nothing toward the breaker, with or without partitions; each panicked
// (ctx.Err(), or the partition lookup).
func TestNilContext(t *testing.T) {
	client := redistest.Start(t).Client(t)
	primary, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := floodgate.Must(floodgate.NewFixedWindow("p", 1, time.Minute))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, opts := range []fallback.Options{{}, {Partition: func(context.Context, string) string { return "node-a" }}} {
		local, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := fallback.New(primary, local, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		partitioned := opts.Partition != nil
		key := floodgate.Key("fgt-nilctx", p, "u")
		if partitioned {
			key += "-partitioned"
		}
		var noCtx context.Context
		want := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, floodgate.ErrNilContext) || !strings.HasPrefix(err.Error(), "fallback: ") {
				t.Fatalf("partitioned %v: %s: %v, want fallback: ... ErrNilContext", partitioned, what, err)
			}
		}
		out := make([]floodgate.Result, 1)
		want("Decide", st.Decide(noCtx, now, []floodgate.Layer{{Policy: p, Key: key, Cost: 1}}, out))
		called := false
		want("Call", st.Call(noCtx, key, func(context.Context) error { called = true; return nil }))
		want("CallWrite", st.CallWrite(noCtx, key, func(context.Context) (bool, error) { called = true; return true, nil }))
		if called {
			t.Fatalf("partitioned %v: a function was called with a nil context", partitioned)
		}
		if n := client.Exists(context.Background(), key).Val(); n != 0 {
			t.Fatalf("partitioned %v: a decision with a nil context wrote its key", partitioned)
		}
		if s := st.BreakerState(); s != fallback.BreakerClosed {
			t.Fatalf("partitioned %v: breaker %v", partitioned, s)
		}
	}
}

// TestCallNilFunctionIsInvalidPolicy: Call and CallWrite given a nil
// function return an error wrapping floodgate.ErrInvalidPolicy, as
// errors.go says of every error of the module; it wrapped nothing.
func TestCallNilFunctionIsInvalidPolicy(t *testing.T) {
	primary, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fallback.New(primary, local, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Call(context.Background(), "", nil); !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), "Call: nil function") {
		t.Errorf("Call(nil) = %v, want ErrInvalidPolicy naming the nil function", err)
	}
	if err := st.CallWrite(context.Background(), "", nil); !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), "CallWrite: nil function") {
		t.Errorf("CallWrite(nil) = %v, want ErrInvalidPolicy naming the nil function", err)
	}
}
