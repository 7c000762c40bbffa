package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRedisForeignMarker: a value floodgate did not write at a period's
// marker key (a stray SET, a list, a hash) is a foreign value, as one at
// the usage key is: every operation fails with ErrStoreUnavailable and
// ErrForeignValue and leaves the key as it was. The script only asked
// whether the marker existed, so with the usage missing a check, status,
// reserve or settle said ErrQuotaStateLost ("restore it with Restore"),
// and Restore then overwrote the foreign value (ReplacedLost true); with
// the usage present every write replaced it. A settle reading the previous
// period's marker (its usage lost inside the grace) is refused the same
// way. Runs on a single Redis and on a Redis Cluster.
func TestRedisForeignMarker(t *testing.T) {
	type client interface {
		Client
		redis.Cmdable
	}
	run := func(t *testing.T, c client) {
		s, err := NewRedisStore(c)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		q := newQuota(t, s, Policy{Name: "fm", Limit: 100, Calendar: Calendar{Unit: Day}}, Options{Prefix: "fm"})
		foreign := []struct {
			name  string
			write func(key string) error
			same  func(key string) bool
		}{
			{"string", func(k string) error { return c.Set(ctx, k, "junk", 0).Err() },
				func(k string) bool { return c.Get(ctx, k).Val() == "junk" }},
			{"list", func(k string) error { return c.LPush(ctx, k, "junk").Err() },
				func(k string) bool { return c.LLen(ctx, k).Val() == 1 }},
			{"hash", func(k string) error { return c.HSet(ctx, k, "used", "1").Err() },
				func(k string) bool { return c.HGet(ctx, k, "used").Val() == "1" }},
		}
		ops := []struct {
			name string
			do   func(id string) (Result, error)
		}{
			{"check", func(id string) (Result, error) { return q.CheckAt(ctx, t0, id, 1) }},
			{"status", func(id string) (Result, error) { return q.CheckAt(ctx, t0, id, 0) }},
			{"reserve", func(id string) (Result, error) { return q.ReserveAt(ctx, t0, id, "r1", 1) }},
			{"settle", func(id string) (Result, error) { return q.SettleAt(ctx, t0, id, "s1", 1) }},
			{"restore", func(id string) (Result, error) { return q.RestoreAt(ctx, t0, id, 5) }},
		}
		for _, f := range foreign {
			for _, usage := range []bool{false, true} {
				for _, op := range ops {
					id := "u:" + f.name + ":" + op.name
					if usage {
						id += ":used"
					}
					if usage {
						if _, err := q.CheckAt(ctx, t0, id, 1); err != nil {
							t.Fatal(err)
						}
					}
					marker := newKeySet(q.keyBase(id, q.PeriodAt(t0))).marker
					if err := c.Del(ctx, marker).Err(); err != nil {
						t.Fatal(err)
					}
					if err := f.write(marker); err != nil {
						t.Fatal(err)
					}
					if err := c.PExpire(ctx, marker, time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
					r, err := op.do(id)
					if !errors.Is(err, floodgate.ErrForeignValue) || !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, ErrQuotaStateLost) {
						t.Errorf("%s on a %s at the marker (usage present %v): %+v, %v; want ErrStoreUnavailable and ErrForeignValue", op.name, f.name, usage, r, err)
					}
					if !f.same(marker) {
						t.Errorf("%s on a %s at the marker (usage present %v) changed it", op.name, f.name, usage)
					}
				}
			}
		}
		// The previous period's marker, read by a settle while that
		// period's usage would count as lost.
		next := q.PeriodAt(t0).End.Add(time.Minute)
		for _, f := range foreign {
			id := "p:" + f.name
			if _, err := q.CheckAt(ctx, t0, id, 1); err != nil {
				t.Fatal(err)
			}
			keys := newKeySet(q.keyBase(id, q.PeriodAt(t0)))
			if err := c.Del(ctx, keys.usage, keys.marker).Err(); err != nil {
				t.Fatal(err)
			}
			if err := f.write(keys.marker); err != nil {
				t.Fatal(err)
			}
			if err := c.PExpire(ctx, keys.marker, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := q.SettleAt(ctx, next, id, "late", 1)
			if !errors.Is(err, floodgate.ErrForeignValue) || !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, ErrQuotaStateLost) {
				t.Errorf("settle with a %s at the previous period's marker: %+v, %v; want ErrStoreUnavailable and ErrForeignValue", f.name, r, err)
			}
		}
		// What floodgate writes there is still read as its own.
		if _, err := q.CheckAt(ctx, t0, "fine", 1); err != nil {
			t.Fatal(err)
		}
		if err := c.Del(ctx, usageKey(q, "fine", t0)).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := q.CheckAt(ctx, t0, "fine", 1); !errors.Is(err, ErrQuotaStateLost) {
			t.Fatalf("check with floodgate's own marker and no usage: %v, want ErrQuotaStateLost", err)
		}
		if r, err := q.RestoreAt(ctx, t0, "fine", 5); err != nil || !r.ReplacedLost || r.Used != 5 {
			t.Fatalf("restore over floodgate's own marker: %+v, %v", r, err)
		}
	}
	t.Run("redis", func(t *testing.T) { run(t, redistest.Start(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Redis Cluster")
		}
		run(t, redistest.StartCluster(t).Client(t))
	})
}
