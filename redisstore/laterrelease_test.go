//go:build unix

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// clusterNode returns the index in redistest.Cluster.Nodes of the primary
// that serves slot (redis-cli's assignment, see redistest.Cluster).
func clusterNode(slot int) int {
	switch {
	case slot <= 5460:
		return 0
	case slot <= 10922:
		return 1
	}
	return 2
}

// TestSplitReleaseAfterDeadline: on a real three-primary Redis Cluster, a
// split decision whose user part is reserved and whose global part, on a
// frozen primary (SIGSTOP), times out at the caller's deadline must still
// give the user part back. The caller's context has ended by then, so the
// release is sent in the background with a context of its own: the user's
// layer gets its charge back, and no release failure is counted. (Sent
// with the caller's context, the release failed at once without being
// sent, and the user's layer kept the charge of a request the store did
// not admit.) The decision itself is indeterminate, as the global part's
// outcome is unknown.
func TestSplitReleaseAfterDeadline(t *testing.T) {
	t.Parallel() // mostly waits for servers to form
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	var reported atomic.Int64
	s, err := New(cc, Options{OnReleaseFailure: func(error) { reported.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	prefix := uniquePrefix(t)
	now := vectors.T0.Add(12 * time.Hour).UnixMicro()
	// The global layer admits more per hour than the user's, so it is
	// reserved last, after the user's part admitted.
	user := layered(t, "user", floodgate.FixedWindow, 10)
	global := layered(t, "global", floodgate.FixedWindow, 100)
	ul := floodgate.Layer{Policy: user, Key: algo.KeyAt(prefix, user, "u", now), Cost: 1}
	gl := floodgate.Layer{Policy: global, Key: algo.KeyAt(prefix, global, "g", now), Cost: 1}
	for i := 0; clusterNode(Slot(gl.Key)) == clusterNode(Slot(ul.Key)); i++ {
		gl.Key = algo.KeyAt(prefix, global, fmt.Sprintf("g%d", i), now)
	}
	ctx := context.Background()
	peek := func() floodgate.Result {
		t.Helper()
		out := make([]floodgate.Result, 1)
		if err := s.Decide(ctx, now, []floodgate.Layer{withCost(ul, 0)}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	// Both primaries are known and connected before one is frozen; a
	// split decision admitted takes one from each layer.
	out := make([]floodgate.Result, 2)
	if err := s.Decide(ctx, now, []floodgate.Layer{ul, gl}, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("first decision: %+v, %v", out, err)
	}
	if r := peek(); r.Remaining != 9 {
		t.Fatalf("the user's layer after one admitted request: %+v, want 9 left", r)
	}

	frozen := cl.Nodes[clusterNode(Slot(gl.Key))]
	thaw := func() { _ = syscall.Kill(frozen.Pid, syscall.SIGCONT) }
	t.Cleanup(thaw)
	if err := syscall.Kill(frozen.Pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", frozen.Addr, err)
	}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = s.Decide(dctx, now, []floodgate.Layer{ul, gl}, out)
	cancel()
	if !errors.Is(err, floodgate.ErrIndeterminate) {
		t.Fatalf("with the global part's primary frozen: %v, want ErrIndeterminate", err)
	}
	if fk, ok := errors.AsType[*floodgate.FailedKeyError](err); !ok || fk.Key != gl.Key {
		t.Errorf("the error %v names no failed key, or not the global one's", err)
	}
	// The user's part was reserved, then released in the background:
	// done once WaitReleases returns.
	if err := s.WaitReleases(ctx); err != nil {
		t.Fatal(err)
	}
	if r := peek(); r.Remaining != 9 {
		t.Errorf("the user's layer kept the charge of a request not admitted: %+v, want 9 left", r)
	}
	if n := s.ReleaseFailures(); n != 0 || reported.Load() != 0 {
		t.Fatalf("ReleaseFailures %d, %d reported; want none", n, reported.Load())
	}
	thaw()
}

// TestWaitReleases: WaitReleases waits for a release in the background
// (its Redis frozen, it cannot end) until its context ends, with that
// context's error; once Redis answers, it returns when the release is done.
func TestWaitReleases(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(srv.Client(t), Options{SlotCheck: SlotCheckOn})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.WaitReleases(ctx); err != nil {
		t.Fatalf("with nothing in the background: %v", err)
	}
	pol := layered(t, "user", floodgate.FixedWindow, 10)
	now := vectors.T0.UnixMicro()
	l := floodgate.Layer{Policy: pol, Key: "{u}", Cost: 1}
	out := make([]floodgate.Result, 1)
	if err := s.Decide(ctx, now, []floodgate.Layer{l}, out); err != nil || !out[0].Allowed {
		t.Fatalf("first decision: %+v, %v", out, err)
	}
	thaw := func() { _ = syscall.Kill(srv.Pid, syscall.SIGCONT) }
	t.Cleanup(thaw)
	if err := syscall.Kill(srv.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p := &part{layers: []floodgate.Layer{l}, out: make([]floodgate.Result, 1), undo: make([][undoWidth]int64, 1)}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	s.releaseLater(ended, now, p)
	if !p.later {
		t.Fatalf("not sent in the background: %v", p.relErr)
	}
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer wcancel()
	if err := s.WaitReleases(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReleases with the release stuck on a frozen Redis: %v, want its context's deadline", err)
	}
	thaw()
	if err := s.WaitReleases(ctx); err != nil {
		t.Fatal(err)
	}
	if len(s.laterReleases) != 0 {
		t.Fatalf("%d releases still hold a token after WaitReleases", len(s.laterReleases))
	}
}

// TestWaitReleasesWhileReleasing: WaitReleases may run while releases
// start and end (a review: on a sync.WaitGroup, a release started as the
// last one ended, during a Wait, panicked with "WaitGroup is reused
// before previous Wait has returned", and killed the process).
func TestWaitReleasesWhileReleasing(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(srv.Client(t), Options{SlotCheck: SlotCheckOn})
	if err != nil {
		t.Fatal(err)
	}
	pol := layered(t, "user", floodgate.FixedWindow, 10)
	now := vectors.T0.UnixMicro()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := &part{layers: []floodgate.Layer{{Policy: pol, Key: "{u}", Cost: 1}}, out: make([]floodgate.Result, 1), undo: make([][undoWidth]int64, 1)}
			s.releaseLater(ended, now, p)
			for len(s.laterReleases) > 0 { // the release ends: none is left
				runtime.Gosched()
			}
			for range i % 200 {
				runtime.Gosched()
			}
		}
	}()
	ctx := context.Background()
	for range 20000 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.WaitReleases(wctx)
		cancel()
		if err != nil {
			t.Fatalf("WaitReleases: %v", err)
		}
	}
	close(stop)
	<-done
}

// TestReleaseLaterBounded: with maxLaterReleases releases in the
// background already, a release whose call's context has ended is not
// sent: it is a failed release (p.relErr), and the part is not marked as
// released in the background.
func TestReleaseLaterBounded(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(srv.Client(t), Options{SlotCheck: SlotCheckOn})
	if err != nil {
		t.Fatal(err)
	}
	for range maxLaterReleases {
		s.laterReleases <- struct{}{}
	}
	p := &part{
		layers: []floodgate.Layer{{Policy: layered(t, "user", floodgate.FixedWindow, 10), Key: "{u}", Cost: 1}},
		out:    []floodgate.Result{{RetryAfter: time.Second}},
		undo:   make([][undoWidth]int64, 1),
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.releaseLater(ctx, vectors.T0.UnixMicro(), p)
	if p.relErr == nil || p.later {
		t.Fatalf("relErr %v, later %v: want a failed release, not one in the background", p.relErr, p.later)
	}
	if p.out[0].RetryAfter != 0 {
		t.Fatalf("the standing of a layer whose release failed keeps a RetryAfter: %+v", p.out[0])
	}
}

// TestSplitErrorKeptIsIndeterminateOnly: a part that failed without
// writing (unavailable, or a foreign value) beside a part whose release
// failed or went to the background is indeterminate, never also
// ErrStoreUnavailable ("nothing written") or ErrForeignValue, which a
// caller testing those first took for a clean failure (a review); the
// failed part's key still names its primary.
func TestSplitErrorKeptIsIndeterminateOnly(t *testing.T) {
	pol := layered(t, "user", floodgate.FixedWindow, 10)
	for _, tc := range []struct {
		name    string
		failErr error
		held    part
	}{
		{"release failed", fmt.Errorf("%w: OOM", floodgate.ErrStoreUnavailable), part{slot: 1, relErr: errors.New("i/o timeout")}},
		{"release in the background", fmt.Errorf("%w: dial: connection refused", floodgate.ErrStoreUnavailable), part{slot: 1, later: true}},
		{"foreign value", fmt.Errorf("%w: a string", floodgate.ErrForeignValue), part{slot: 1, relErr: errors.New("i/o timeout")}},
	} {
		held := tc.held
		held.layers = []floodgate.Layer{{Policy: pol, Key: "{u}", Cost: 1}}
		failed := part{slot: 2, err: tc.failErr, layers: []floodgate.Layer{{Policy: pol, Key: "{g}", Cost: 1}}}
		err := splitError([]part{held, failed})
		var fk *floodgate.FailedKeyError
		switch {
		case !errors.Is(err, floodgate.ErrIndeterminate):
			t.Errorf("%s: %v, want ErrIndeterminate", tc.name, err)
		case errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrForeignValue):
			t.Errorf("%s: %v is also unavailable or a foreign value", tc.name, err)
		case !errors.As(err, &fk) || fk.Key != "{g}":
			t.Errorf("%s: %v names no failed key {g}", tc.name, err)
		}
	}
}
