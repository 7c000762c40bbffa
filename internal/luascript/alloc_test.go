package luascript

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// answerClient answers every RunInts call with two integers, sending
// nothing.
type answerClient struct{}

func (answerClient) Process(_ context.Context, cmd redis.Cmder) error {
	if c, ok := cmd.(noRetryIntsCmd); ok {
		c.SetVal([]int64{1, 2})
	}
	return nil
}

// TestRunIntsAllocations: a script call costs two allocations here (the
// command and its reply), none for the wrapper that marks it NoRetry and
// implements replicawait.EvalFallback: a wrapper two words wide (the
// command and its Script) cost a third on every call once made an
// interface, which is why useEval finds the source by the SHA-1.
func TestRunIntsAllocations(t *testing.T) {
	s := New("return {1, 2}", Options{})
	argv := []any{nil, nil, 1, "k", 1}
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _, _ = s.RunInts(ctx, answerClient{}, argv) }); n > 2 {
		t.Fatalf("RunInts allocates %v times per call, want at most 2", n)
	}
}

// TestUseEvalFindsTheSource: the EVALSHA of a Script becomes its EVAL;
// anything else is left alone.
func TestUseEvalFindsTheSource(t *testing.T) {
	s := New("return 'use-eval'", Options{})
	args := []any{"evalsha", s.shaArg, 1, "k"}
	if !useEval(args) || args[0] != "eval" || args[1] != "return 'use-eval'" {
		t.Fatalf("useEval of an EVALSHA: %v", args)
	}
	if useEval(args) {
		t.Fatalf("useEval of an EVAL reported a change: %v", args)
	}
	unknown := []any{"evalsha", "0000000000000000000000000000000000000000", 1, "k"}
	if useEval(unknown) || unknown[0] != "evalsha" {
		t.Fatalf("useEval of an unknown SHA-1: %v", unknown)
	}
}
