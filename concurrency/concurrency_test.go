package concurrency

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// eachBackend runs f against a fresh MemoryStore and, when redis-server is
// installed, a RedisStore on a private server (client nil for memory).
func eachBackend(t *testing.T, f func(t *testing.T, s Store, c *redis.Client)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		m, err := NewMemoryStore(MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f(t, m, nil)
	})
	t.Run("redis", func(t *testing.T) {
		s, c := newRedisStore(t)
		f(t, s, c)
		redistest.AuditTTL(t, c, "*") // no lease set ever lives without a TTL
	})
}

func newLimiter(t testing.TB, s Store, p Policy, prefix string) *Limiter {
	t.Helper()
	l, err := New(s, p, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCapHeldUnderLoad: 1,000 goroutines acquire, hold briefly and release
// a cap of 50; an atomic in-flight counter, raised after Acquire and
// lowered before Release, never exceeds 50.
func TestCapHeldUnderLoad(t *testing.T) {
	eachBackend(t, func(t *testing.T, s Store, _ *redis.Client) {
		l := newLimiter(t, s, Policy{Name: "cap", Limit: 50, LeaseTTL: time.Hour}, "load")
		ctx := context.Background()
		var inFlight, peak, admitted atomic.Int64
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(func() {
				r, err := l.AcquireAt(ctx, t0, "tenant")
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Allowed {
					return
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				runtime.Gosched()
				inFlight.Add(-1)
				if ok, err := l.ReleaseAt(ctx, t0, r.Lease); err != nil || !ok {
					t.Errorf("release: %v, %v", ok, err)
				}
			})
		}
		wg.Wait()
		if p := peak.Load(); p > 50 || p < 1 {
			t.Fatalf("peak in flight %d, want 1..50", p)
		}
		t.Logf("admitted %d of 1000, peak in flight %d", admitted.Load(), peak.Load())
		if r, err := l.AcquireAt(ctx, t0, "tenant"); err != nil || r.InFlight != 1 {
			t.Fatalf("after everyone released: %+v, %v", r, err)
		}
	})
}

// TestCapExactWithoutRelease: 1,000 goroutines, nobody releases, cap 50 →
// exactly 50 acquisitions succeed, every run.
func TestCapExactWithoutRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, s Store, _ *redis.Client) {
		l := newLimiter(t, s, Policy{Name: "cap", Limit: 50, LeaseTTL: time.Hour}, "exact")
		ctx := context.Background()
		for run := range 3 {
			identity := "tenant-" + string(rune('a'+run))
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 1000 {
				wg.Go(func() {
					r, err := l.AcquireAt(ctx, t0, identity)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted.Add(1)
					} else if r.InFlight != 50 || r.Remaining != 0 || r.RetryAfter != time.Hour {
						t.Errorf("denial %+v, want 50 in flight and retry after 1h", r)
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != 50 {
				t.Fatalf("run %d: %d admitted, want exactly 50", run, got)
			}
		}
	})
}

// TestLeaseLifecycle steps through expiry, release and renewal at fixed
// instants, no sleeping.
func TestLeaseLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := context.Background()
		l := newLimiter(t, s, Policy{Name: "life", Limit: 2, LeaseTTL: time.Minute}, "life")
		at := func(d time.Duration) time.Time { return t0.Add(d) }
		acquire := func(d time.Duration, wantOK bool, wantInFlight int64) Lease {
			t.Helper()
			r, err := l.AcquireAt(ctx, at(d), "u")
			if err != nil || r.Allowed != wantOK || r.InFlight != wantInFlight || r.Limit != 2 {
				t.Fatalf("acquire at +%v: %+v, %v; want allowed=%v in flight %d", d, r, err, wantOK, wantInFlight)
			}
			if wantOK && !r.Lease.Expires.Equal(at(d+time.Minute)) {
				t.Fatalf("lease expires %v, want %v", r.Lease.Expires, at(d+time.Minute))
			}
			return r.Lease
		}
		a := acquire(0, true, 1)
		b := acquire(10*time.Second, true, 2)
		if r, _ := l.AcquireAt(ctx, at(20*time.Second), "u"); r.Allowed || r.RetryAfter != 40*time.Second {
			t.Fatalf("full: %+v, want denied with retry after 40s (a's expiry)", r)
		}
		// A crashed holder: a expires at +60s exactly.
		acquire(60*time.Second-time.Microsecond, false, 2)
		c := acquire(60*time.Second, true, 2)
		if ok, err := l.ReleaseAt(ctx, at(61*time.Second), a); err != nil || ok {
			t.Fatalf("release of expired lease: %v, %v; want false", ok, err)
		}
		if _, err := l.RenewAt(ctx, at(61*time.Second), a); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("renew of expired lease: %v, want ErrLeaseLost", err)
		}
		// Renewal keeps b past its first expiry.
		b2, err := l.RenewAt(ctx, at(65*time.Second), b)
		if err != nil || !b2.Expires.Equal(at(125*time.Second)) || b2.ID != b.ID {
			t.Fatalf("renew b: %+v, %v", b2, err)
		}
		// Renewing with an earlier clock never shortens a lease.
		if b3, err := l.RenewAt(ctx, at(30*time.Second), b2); err != nil || !b3.Expires.Equal(b2.Expires) {
			t.Fatalf("renew with a lagging clock: %+v, %v", b3, err)
		}
		acquire(71*time.Second, false, 2) // b (renewed) and c still live
		if ok, err := l.ReleaseAt(ctx, at(72*time.Second), c); err != nil || !ok {
			t.Fatalf("release c: %v, %v", ok, err)
		}
		if ok, err := l.ReleaseAt(ctx, at(72*time.Second), c); err != nil || ok {
			t.Fatalf("second release of c: %v, %v; want false (idempotent)", ok, err)
		}
		acquire(73*time.Second, true, 2)
		acquire(125*time.Second, true, 2) // b expired at +125s, one left
	})
}

// TestRetryAfterOverLimit: after the limit is lowered below the leases
// held (a reload, a tier change), a denied acquire's RetryAfter is when
// enough of them expire to free a slot, not the earliest expiry, which
// leaves the identity still over its limit.
func TestRetryAfterOverLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := context.Background()
		wide := newLimiter(t, s, Policy{Name: "over", Limit: 4, LeaseTTL: time.Minute}, "over")
		for i := range 4 {
			if r, err := wide.AcquireAt(ctx, t0.Add(time.Duration(i)*10*time.Second), "u"); err != nil || !r.Allowed {
				t.Fatalf("acquire %d: %+v, %v", i, r, err)
			}
		} // the leases expire at +60s, +70s, +80s and +90s
		narrow := newLimiter(t, s, Policy{Name: "over", Limit: 2, LeaseTTL: time.Minute}, "over")
		for _, tc := range []struct {
			at, want time.Duration
			inFlight int64
		}{
			{40 * time.Second, 40 * time.Second, 4}, // below 2 once three expired: +80s
			{65 * time.Second, 15 * time.Second, 3}, // two more to go: +80s
			{75 * time.Second, 5 * time.Second, 2},  // at the limit: the earliest, +80s
		} {
			r, err := narrow.AcquireAt(ctx, t0.Add(tc.at), "u")
			if err != nil || r.Allowed || r.InFlight != tc.inFlight || r.RetryAfter != tc.want {
				t.Fatalf("acquire at +%v: %+v, %v; want denied, %d in flight, retry after %v", tc.at, r, err, tc.inFlight, tc.want)
			}
		}
		if r, err := narrow.AcquireAt(ctx, t0.Add(80*time.Second), "u"); err != nil || !r.Allowed {
			t.Fatalf("acquire at +80s, when the retry said: %+v, %v; want allowed", r, err)
		}
	})
}

func TestBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, s Store, c *redis.Client) {
		ctx := context.Background()
		l := newLimiter(t, s, Policy{Name: "bad", Limit: 1}, "bad")
		for _, id := range []string{"", "has space", strings.Repeat("x", MaxLeaseIDLen+1), "tab\t"} {
			if _, err := l.ReleaseAt(ctx, t0, Lease{Identity: "u", ID: id}); !errors.Is(err, floodgate.ErrInvalidKey) {
				t.Errorf("release %q: %v", id, err)
			}
			if _, err := l.RenewAt(ctx, t0, Lease{Identity: "u", ID: id}); !errors.Is(err, floodgate.ErrInvalidKey) {
				t.Errorf("renew %q: %v", id, err)
			}
		}
		for _, at := range []time.Time{{}, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)} {
			if _, err := l.AcquireAt(ctx, at, "u"); !errors.Is(err, floodgate.ErrInvalidTime) {
				t.Errorf("acquire at %v: %v, want ErrInvalidTime (a lease was taken before)", at, err)
			}
			if _, err := l.RenewAt(ctx, at, Lease{Identity: "u", ID: "x"}); !errors.Is(err, floodgate.ErrInvalidTime) {
				t.Errorf("renew at %v: %v, want ErrInvalidTime", at, err)
			}
		}
		//lint:ignore SA1012 a nil context is the bad input under test
		if _, err := l.AcquireAt(nil, t0, "u"); !errors.Is(err, floodgate.ErrNilContext) {
			t.Errorf("nil context: %v", err)
		}
		if ok, err := l.ReleaseAt(ctx, t0, Lease{Identity: "nobody", ID: "unknown"}); ok || err != nil {
			t.Errorf("release of an unknown lease: %v, %v", ok, err)
		}
		if c != nil && c.DBSize(ctx).Val() != 0 {
			t.Errorf("bad input wrote keys")
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := l.AcquireAt(cancelled, t0, "u"); !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Errorf("cancelled context: %v", err)
		}
	})
	m, _ := NewMemoryStore(MemoryOptions{})
	for _, p := range []Policy{
		{Name: "", Limit: 1},
		{Name: "x", Limit: 0},
		{Name: "x", Limit: MaxLimit + 1},
		{Name: "x", Limit: 1, LeaseTTL: time.Microsecond},
		{Name: "x", Limit: 1, LeaseTTL: 25 * time.Hour},
		{Name: "x", Limit: 1, LeaseTTL: -time.Second},
		{Name: "x", Limit: 1, LeaseTTL: time.Second + time.Nanosecond},
	} {
		_, err := New(m, p, Options{})
		if !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("New(%+v) = %v, want ErrInvalidPolicy", p, err)
			continue
		}
		// One prefix, naming what kind of policy: it said "concurrency:
		// floodgate: invalid policy: policy name ..." for a bad name.
		if msg := err.Error(); !strings.HasPrefix(msg, "floodgate: invalid policy: concurrency policy") || strings.Count(msg, "floodgate:") != 1 {
			t.Errorf("New(%+v) error %q, want one prefix: floodgate: invalid policy: concurrency policy ...", p, msg)
		}
	}
	if _, err := New(nil, Policy{Name: "x", Limit: 1}, Options{}); err == nil {
		t.Error("New accepted a nil store")
	}
	// A nil pointer inside the interface used to be accepted, then panic on
	// the first Acquire.
	for _, s := range []Store{(*MemoryStore)(nil), (*RedisStore)(nil)} {
		if l, err := New(s, Policy{Name: "x", Limit: 1}, Options{}); l != nil || !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("New(%T(nil)) = %v, %v; want ErrInvalidPolicy", s, l, err)
		}
	}
	if s, err := NewRedisStore((*redis.Client)(nil)); s != nil || !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("NewRedisStore(nil *redis.Client) = %v, %v; want ErrInvalidPolicy", s, err)
	}
	if _, err := New(m, Policy{Name: "x", Limit: 1}, Options{Prefix: "{x}"}); !errors.Is(err, floodgate.ErrInvalidKey) {
		t.Errorf("bad prefix: %v", err)
	}
}

// TestMemoryStoreFull: a full store refuses new identities and keeps
// serving known ones.
func TestMemoryStoreFull(t *testing.T) {
	m, err := NewMemoryStore(MemoryOptions{Shards: 1, MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := newLimiter(t, m, Policy{Name: "full", Limit: 5}, "full")
	for _, id := range []string{"a", "b"} {
		if _, err := l.AcquireAt(ctx, t0, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.AcquireAt(ctx, t0, "c"); !errors.Is(err, floodgate.ErrStoreFull) {
		t.Fatalf("third identity: %v, want ErrStoreFull", err)
	}
	if r, err := l.AcquireAt(ctx, t0, "a"); err != nil || r.InFlight != 2 {
		t.Fatalf("known identity: %+v, %v", r, err)
	}
	// Once the leases expire (their holders crashed), the identities are
	// swept and c fits.
	if r, err := l.AcquireAt(ctx, t0.Add(2*DefaultLeaseTTL), "c"); err != nil || r.InFlight != 1 {
		t.Fatalf("c after expiry: %+v, %v", r, err)
	}
}

// TestMemoryStoreMaxKeysExact: a MemoryStore with MaxKeys 10 (default 64
// partitions) tracks exactly 10 identities, refusing the rest with
// ErrStoreFull (it used to round per partition and track 64).
func TestMemoryStoreMaxKeysExact(t *testing.T) {
	m, err := NewMemoryStore(MemoryOptions{MaxKeys: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := newLimiter(t, m, Policy{Name: "exact", Limit: 5}, "exact")
	held := 0
	for i := range 2000 {
		_, err := l.AcquireAt(ctx, t0, fmt.Sprint("id", i))
		switch {
		case err == nil:
			held++
		case !errors.Is(err, floodgate.ErrStoreFull):
			t.Fatalf("id%d: %v, want nil or ErrStoreFull", i, err)
		}
	}
	if held != 10 || m.sets.Len() != 10 {
		t.Fatalf("%d identities admitted, %d tracked; want 10 of each", held, m.sets.Len())
	}
}
