package clocksync_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/clocksync"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// scriptedSource answers TIME from a simulated server whose clock is the
// local clock plus offset, with the given request and reply delays per
// call, advancing the simulated local clock as the call "travels".
type scriptedSource struct {
	mu     sync.Mutex
	local  time.Time
	offset time.Duration
	delays [][2]time.Duration // per call: request, reply
	calls  int
	fail   error
}

func (s *scriptedSource) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local
}

func (s *scriptedSource) Time(ctx context.Context) *redis.TimeCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := redis.NewTimeCmd(ctx)
	if s.fail != nil {
		cmd.SetErr(s.fail)
		return cmd
	}
	d := s.delays[s.calls%len(s.delays)]
	s.calls++
	s.local = s.local.Add(d[0])
	cmd.SetVal(s.local.Add(s.offset))
	s.local = s.local.Add(d[1])
	return cmd
}

func TestKeepsSmallestRoundTrip(t *testing.T) {
	const offset = 3 * time.Second
	src := &scriptedSource{local: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), offset: offset}
	var seen []time.Duration
	c, err := clocksync.New(src, clocksync.Options{Samples: 3, Keep: 2, Now: src.now, Observer: observerFunc(func(off, rtt time.Duration) {
		seen = append(seen, rtt)
	})})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, synced := c.Offset(); synced {
		t.Fatal("synced before the first round")
	}
	if got := c.Now(); !got.Equal(src.now()) {
		t.Fatalf("Now before syncing = %v, want the local time %v", got, src.now())
	}
	steps := []struct {
		name    string
		delays  [][2]time.Duration
		wantOff time.Duration // estimate chosen after the round
		wantRTT time.Duration
	}{
		// Asymmetric paths skew an estimate by (request-reply)/2; the
		// round keeps its fastest sample: 4ms, estimate offset+1ms.
		{"round 1", [][2]time.Duration{{30 * time.Millisecond, 10 * time.Millisecond}, {3 * time.Millisecond, time.Millisecond}, {20 * time.Millisecond, 20 * time.Millisecond}},
			offset + time.Millisecond, 4 * time.Millisecond},
		// A slow round does not displace the better sample of round 1.
		{"round 2, slower", [][2]time.Duration{{50 * time.Millisecond, 10 * time.Millisecond}},
			offset + time.Millisecond, 4 * time.Millisecond},
		// Round 1 leaves the window of 2 rounds: round 2's and round 3's
		// best compete, round 3's 2ms symmetric sample wins, exact.
		{"round 3", [][2]time.Duration{{time.Millisecond, time.Millisecond}, {9 * time.Millisecond, time.Millisecond}},
			offset, 2 * time.Millisecond},
	}
	for _, st := range steps {
		src.mu.Lock()
		src.delays, src.calls = st.delays, 0
		src.mu.Unlock()
		if err := c.Sync(context.Background()); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		off, rtt, synced := c.Offset()
		if off != st.wantOff || rtt != st.wantRTT || !synced {
			t.Fatalf("%s: offset %v rtt %v synced %v; want %v, %v, true", st.name, off, rtt, synced, st.wantOff, st.wantRTT)
		}
		if got, want := c.Now(), src.now().Add(st.wantOff); !got.Equal(want) {
			t.Fatalf("%s: Now = %v, want %v", st.name, got, want)
		}
	}
	if fmt.Sprint(seen) != "[4ms 4ms 2ms]" {
		t.Fatalf("observer saw rtts %v, want [4ms 4ms 2ms]", seen)
	}
	// A round without a sample reports it and keeps the offset.
	src.mu.Lock()
	src.fail = errors.New("connection refused")
	src.mu.Unlock()
	if err := c.Sync(context.Background()); !errors.Is(err, clocksync.ErrNoSample) {
		t.Fatalf("failed round: %v, want ErrNoSample", err)
	}
	if off, _, _ := c.Offset(); off != offset {
		t.Fatalf("offset %v after a failed round, want it kept at %v", off, offset)
	}
}

type observerFunc func(offset, rtt time.Duration)

func (f observerFunc) ObserveClock(offset, rtt time.Duration) { f(offset, rtt) }

// TestMeasuresRealRedis checks the NTP bound against a real server: with
// the local clock 5 s ahead of the machine's (and so of Redis's), the
// measured offset is -5 s within half the round trip (plus TIME's 1 µs
// resolution and a millisecond of slack).
func TestMeasuresRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second, 0} {
		c, err := clocksync.New(srv.Client(t), clocksync.Options{Now: func() time.Time { return time.Now().Add(skew) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		off, rtt, _ := c.Offset()
		if diff := (off + skew).Abs(); diff > rtt/2+time.Millisecond {
			t.Fatalf("skew %v: offset %v (rtt %v) is %v from -skew, beyond rtt/2+1ms", skew, off, rtt, diff)
		}
		if diff := time.Until(c.Now()).Abs(); diff > rtt/2+50*time.Millisecond {
			t.Fatalf("skew %v: corrected clock is %v from the machine's", skew, diff)
		}
		t.Logf("skew %+v: measured offset %v, rtt %v", skew, off, rtt)
	}
}

func TestRunStopsAndReportsErrors(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	var errs []error
	rounds := 0
	c, err := clocksync.New(srv.Client(t), clocksync.Options{
		Interval: 10 * time.Millisecond, Samples: 1, Timeout: 200 * time.Millisecond,
		Observer: observerFunc(func(time.Duration, time.Duration) { mu.Lock(); rounds++; mu.Unlock() }),
		OnError:  func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitFor(t, "3 rounds", func() bool { mu.Lock(); defer mu.Unlock(); return rounds >= 3 })
	srv.Kill()
	waitFor(t, "a reported error", func() bool { mu.Lock(); defer mu.Unlock(); return len(errs) > 0 })
	srv.Restart(t)
	mu.Lock()
	before := rounds
	mu.Unlock()
	waitFor(t, "rounds after restart", func() bool { mu.Lock(); defer mu.Unlock(); return rounds > before })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(errs[0], clocksync.ErrNoSample) {
		t.Fatalf("reported %v, want ErrNoSample", errs[0])
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	src := &scriptedSource{}
	if _, err := clocksync.New(nil, clocksync.Options{}); !errors.Is(err, clocksync.ErrInvalidOptions) {
		t.Fatalf("nil source: %v", err)
	}
	for _, opts := range []clocksync.Options{
		{Interval: time.Millisecond}, {Samples: -1}, {Samples: 101}, {Keep: -1}, {Keep: 1001}, {Timeout: -time.Second},
	} {
		if c, err := clocksync.New(src, opts); !errors.Is(err, clocksync.ErrInvalidOptions) || c != nil {
			t.Fatalf("New(%+v) = %v, %v; want ErrInvalidOptions", opts, c, err)
		}
	}
}

// TestFollowsAStep: after the local clock steps (NTP correcting a large
// error, a VM resumed), the next round's sample contradicts the
// remembered ones, which are dropped: the offset follows the step at once.
// It used to keep the pre-step sample, with its smaller round trip, for
// Keep rounds (a minute at the defaults), stamping requests 5 s off.
func TestFollowsAStep(t *testing.T) {
	src := &scriptedSource{local: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), offset: 2 * time.Second,
		delays: [][2]time.Duration{{time.Millisecond, time.Millisecond}}}
	c, err := clocksync.New(src, clocksync.Options{Samples: 1, Keep: 6, Now: src.now})
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// The local clock steps 5 s forward; the server's does not. Later
	// rounds are slower (3 ms) than the remembered ones (2 ms).
	src.mu.Lock()
	src.local = src.local.Add(5 * time.Second)
	src.offset -= 5 * time.Second
	src.delays = [][2]time.Duration{{3 * time.Millisecond, 3 * time.Millisecond}}
	src.mu.Unlock()
	if err := c.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if off, rtt, _ := c.Offset(); off != -3*time.Second || rtt != 6*time.Millisecond {
		t.Fatalf("after a 5 s step: offset %v rtt %v, want -3s from the new round (6ms)", off, rtt)
	}
	// A later faster round consistent with the new offset wins again; a
	// slow one does not displace it.
	for _, d := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
		src.mu.Lock()
		src.delays = [][2]time.Duration{{d, d}}
		src.mu.Unlock()
		if err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if off, rtt, _ := c.Offset(); off != -3*time.Second || rtt != 2*time.Millisecond {
			t.Fatalf("round of %v each way: offset %v rtt %v, want -3s at 2ms", d, off, rtt)
		}
	}
}

// TestRunRetriesUntilFirstSync: a Clock whose first round fails (Redis
// down when the service starts) tries again every second, not every
// Interval: with an Interval of an hour it is synced once Redis is back.
// It used to wait for the next Interval (10 s in serve), stamping requests
// with the uncorrected clock meanwhile.
func TestRunRetriesUntilFirstSync(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	c, err := clocksync.New(srv.Client(t), clocksync.Options{Interval: time.Hour, Samples: 1, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	time.Sleep(300 * time.Millisecond) // the first round fails
	if _, _, synced := c.Offset(); synced {
		t.Fatal("synced with Redis down")
	}
	srv.Restart(t)
	waitFor(t, "a synced clock after Redis came back", func() bool { _, _, synced := c.Offset(); return synced })
}

// TestReportsSteps: a step of Redis's clock is reported to OnStep at the
// round that sees it, with the offsets before and after, once per step.
// It was reported nowhere: serve's skew warning, at most once a minute,
// logged one line 48 s after the first of three jumps (+30 s, -300 s,
// +300 s within a minute). The first round, and a better sample moving
// the offset by milliseconds, are no steps.
func TestReportsSteps(t *testing.T) {
	src := &scriptedSource{local: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), offset: 2 * time.Second,
		delays: [][2]time.Duration{{2 * time.Millisecond, 2 * time.Millisecond}}}
	type step struct{ from, to time.Duration }
	var got []step
	c, err := clocksync.New(src, clocksync.Options{Samples: 1, Keep: 6, Now: src.now, OnStep: func(from, to time.Duration) {
		got = append(got, step{from, to})
	}})
	if err != nil {
		t.Fatal(err)
	}
	rounds := []struct {
		name   string
		offset time.Duration // Redis's clock minus the local one, this round
		delay  time.Duration // each way
		want   []step        // every step reported so far
	}{
		{"first round", 2 * time.Second, 2 * time.Millisecond, nil},
		// A faster sample, its estimate 1 ms off the first: the offset
		// moves by 1 ms.
		{"better sample", 2*time.Second + time.Millisecond, time.Millisecond, nil},
		{"Redis +30s", 32*time.Second + time.Millisecond, time.Millisecond, []step{{2*time.Second + time.Millisecond, 32*time.Second + time.Millisecond}}},
		{"same offset", 32*time.Second + time.Millisecond, time.Millisecond, []step{{2*time.Second + time.Millisecond, 32*time.Second + time.Millisecond}}},
		{"Redis -300s", -268*time.Second + time.Millisecond, time.Millisecond, []step{
			{2*time.Second + time.Millisecond, 32*time.Second + time.Millisecond},
			{32*time.Second + time.Millisecond, -268*time.Second + time.Millisecond}}},
		{"Redis +300s", 32*time.Second + time.Millisecond, time.Millisecond, []step{
			{2*time.Second + time.Millisecond, 32*time.Second + time.Millisecond},
			{32*time.Second + time.Millisecond, -268*time.Second + time.Millisecond},
			{-268*time.Second + time.Millisecond, 32*time.Second + time.Millisecond}}},
	}
	for _, r := range rounds {
		src.mu.Lock()
		src.offset, src.delays = r.offset, [][2]time.Duration{{r.delay, r.delay}}
		src.mu.Unlock()
		if err := c.Sync(context.Background()); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(r.want) {
			t.Fatalf("%s: steps reported %v, want %v", r.name, got, r.want)
		}
	}
	// A failed round reports nothing.
	src.mu.Lock()
	src.fail = errors.New("connection refused")
	src.mu.Unlock()
	if err := c.Sync(context.Background()); !errors.Is(err, clocksync.ErrNoSample) {
		t.Fatalf("failed round: %v, want ErrNoSample", err)
	}
	if len(got) != 3 {
		t.Fatalf("steps after a failed round: %v, want the 3 before", got)
	}
}
