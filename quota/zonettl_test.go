package quota

import (
	"context"
	"testing"
	"time"
)

// TestZoneChangeNeverShortensExpiry: calendars differing only in Location
// share a period's usage (StorageTag has no zone, on purpose), so a
// write under a zone whose period ends sooner must not shorten the
// usage's expiry. It did: after UTC, then Tokyo (whose December ends nine
// hours before UTC's), then UTC again, the usage expired at Tokyo's end
// plus the grace while UTC's December still ran, and the next UTC check
// failed with ErrQuotaStateLost (the marker outlives the usage).
func TestZoneChangeNeverShortensExpiry(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skip(err)
	}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		utc := newQuota(t, b.store, Policy{Name: "tz", Limit: 10, Calendar: Calendar{Unit: Month}}, Options{Prefix: "tzttl"})
		tyo := newQuota(t, b.store, Policy{Name: "tz", Limit: 10, Calendar: Calendar{Unit: Month, Location: tokyo}}, Options{Prefix: "tzttl"})
		at := time.Date(2026, 12, 20, 12, 0, 0, 0, time.UTC)
		if r, err := utc.CheckAt(ctx, at, "u", 3); err != nil || r.Remaining != 7 {
			t.Fatalf("UTC: %+v, %v", r, err)
		}
		key := usageKey(utc, "u", at)
		var before time.Duration
		if b.client != nil {
			before = b.client.PTTL(ctx, key).Val()
		}
		if r, err := tyo.CheckAt(ctx, at, "u", 3); err != nil || r.Remaining != 4 {
			t.Fatalf("Tokyo, same period name: %+v, %v", r, err)
		}
		if b.client != nil {
			// Redis counts the TTL from its own clock: compare the
			// key's TTL before and after the Tokyo write.
			if after := b.client.PTTL(ctx, key).Val(); after < before-time.Minute {
				t.Fatalf("the Tokyo write shortened the usage's TTL from %v to %v", before, after)
			}
			return
		}
		// Past Tokyo's December and its grace, within UTC's December.
		late := time.Date(2026, 12, 31, 20, 0, 0, 0, time.UTC)
		if r, err := utc.CheckAt(ctx, late, "u", 3); err != nil || r.Remaining != 1 {
			t.Fatalf("UTC again, after Tokyo's December ended: %+v, %v; want the usage kept", r, err)
		}
	})
}
