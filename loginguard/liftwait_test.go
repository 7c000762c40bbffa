package loginguard

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/replicawait"
)

// TestLiftNotReplicatedSaysWhatWasLifted: a Lift through a
// replicawait.Client whose primary has no replica to confirm it is
// applied on the primary, and returns what it lifted with the error
// wrapping replicawait.ErrNotReplicated, for the unlock's audit line.
func TestLiftNotReplicatedSaysWhatWasLifted(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	plain, err := NewRedis(c, "login")
	if err != nil {
		t.Fatal(err)
	}
	w, err := replicawait.New(c, replicawait.Options{Replicas: 1, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := NewRedis(w, "login")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Secret: []byte("0123456789abcdef0123456789abcdef"), Account: Ladder{Captcha: 1, Delay: 2, Lock: 3, Lockout: time.Hour}}
	app, err := New(plain, opts)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := New(waiting, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ip := netip.MustParseAddr("198.19.5.7")
	for range 4 {
		if _, err := app.Failure(ctx, "alice", ip); err != nil {
			t.Fatal(err)
		}
	}
	lifted, err := admin.Lift(ctx, "alice", netip.Addr{})
	if !errors.Is(err, replicawait.ErrNotReplicated) || !lifted.Account || lifted.IP || lifted.Pair {
		t.Fatalf("Lift without a replica = %+v, %v; want the account lifted and ErrNotReplicated", lifted, err)
	}
	if keys := scanKeys(t, c, "{login}:a:*"); len(keys) != 0 {
		t.Fatalf("the account's state is still on the primary: %v", keys)
	}
}
