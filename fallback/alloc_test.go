package fallback_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestDecideAllocatesOneBudgetContext: the budget of a decision under a
// server's request context (cancellable, no earlier deadline) costs one
// small allocation, not context.WithTimeout's timer, channel and place
// among the parent's children (internal/deadline).
func TestDecideAllocatesOneBudgetContext(t *testing.T) {
	testDecideAllocs(t, fallback.Options{}, 1)
}

// TestPartitionedDecideAllocatesTwoBudgetContexts: with a Partition (Redis
// Cluster in serve), the partition lookup's bound is a shared deadline
// too: one small allocation more, not a context.WithTimeout per decision.
func TestPartitionedDecideAllocatesTwoBudgetContexts(t *testing.T) {
	partition := func(context.Context, string) string { return "node-a" }
	testDecideAllocs(t, fallback.Options{Partition: partition}, 2)
}

// testDecideAllocs checks that a decision under a cancellable parent
// allocates at most want times.
func testDecideAllocs(t *testing.T, opts fallback.Options, want float64) {
	t.Helper()
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	primary, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fallback.New(primary, local, opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := floodgate.NewSlidingWindow("alloc", 1<<30, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	layers := []floodgate.Layer{{Policy: p, Key: "alloc:someone", Cost: 1}}
	out := make([]floodgate.Result, 1)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = parent.Done() // a server's request context has its channel already
	now := time.Now().UnixMicro()
	if err := st.Decide(parent, now, layers, out); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(500, func() {
		if err := st.Decide(parent, now, layers, out); err != nil {
			t.Fatal(err)
		}
	}); n > want {
		t.Errorf("%.1f allocations per decision, want at most %.0f (the budget's shared deadlines)", n, want)
	}
}
