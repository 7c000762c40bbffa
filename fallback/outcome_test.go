package fallback

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNewOutcomeContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	ctx, o := NewOutcomeContext(parent)
	if got := outcomeFrom(ctx); got != o {
		t.Fatalf("outcomeFrom = %p, want %p", got, o)
	}
	if got := ctx.Value(key{}); got != "v" {
		t.Errorf("parent value lost: %v", got)
	}
	child, ccancel := context.WithTimeout(ctx, time.Hour)
	defer ccancel()
	cancel()
	<-child.Done() // cancelling the parent reaches contexts derived from ours
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("Err = %v, want Canceled", ctx.Err())
	}
}
