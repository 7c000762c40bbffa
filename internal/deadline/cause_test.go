package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCauseIsTheTicks: context.Cause of a shared context, and of one
// derived from it, agrees with its Err (nil before the deadline,
// DeadlineExceeded after it), whatever its parent did: the parent's
// cancellation, which is not passed on, is not its cause either.
func TestCauseIsTheTicks(t *testing.T) {
	ticks := New()
	parent, cancel := context.WithCancelCause(context.Background())
	ctx, _ := ticks.WithTimeout(parent, time.Now(), 30*time.Millisecond)
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	cancel(errors.New("the client went away"))
	if ctx.Err() != nil {
		t.Fatalf("Err after the parent's cancellation = %v, want nil", ctx.Err())
	}
	if err := context.Cause(ctx); err != nil {
		t.Errorf("Cause before the deadline = %v, want nil (Err is nil)", err)
	}
	if err := context.Cause(child); err != nil {
		t.Errorf("derived context: Cause before the deadline = %v, want nil", err)
	}
	<-child.Done()
	if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Cause after the deadline = %v, want DeadlineExceeded", err)
	}
	if err := context.Cause(child); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("derived context: Cause = %v, want DeadlineExceeded", err)
	}
	if err := context.Cause(context.WithoutCancel(ctx)); err != nil {
		t.Errorf("WithoutCancel: Cause = %v, want nil", err)
	}
}
