package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate/denycache"
)

// defaultDenyMaxTTL is --deny-cache-max-ttl's default: a flood costs Redis
// one call per key and instance a second, and a reset made elsewhere is
// seen within a second.
const defaultDenyMaxTTL = time.Second

// Bounds of --deny-cache-entries and --deny-cache-max-ttl.
const (
	maxDenyEntries = 10_000_000
	maxDenyMaxTTL  = time.Hour
)

// checkDenyFlags refuses --deny-cache-entries and --deny-cache-max-ttl
// out of range, before anything dials Redis. checkRedisFlags refused them
// in memory mode.
func checkDenyFlags(f serveFlags) error {
	if f.denyEntries == 0 {
		if f.denyMaxTTLSet {
			return errors.New("--deny-cache-max-ttl needs --deny-cache-entries (the cache is off without it)")
		}
		return nil
	}
	if f.denyEntries < 0 || f.denyEntries > maxDenyEntries {
		return fmt.Errorf("--deny-cache-entries %d: out of range 0..%d (0: off)", f.denyEntries, maxDenyEntries)
	}
	if f.denyMaxTTL < time.Millisecond || f.denyMaxTTL > maxDenyMaxTTL {
		return fmt.Errorf("--deny-cache-max-ttl %v: out of range 1ms..%v", f.denyMaxTTL, maxDenyMaxTTL)
	}
	return nil
}

// addDenyCache puts the cache of denials --deny-cache-entries asks for
// (checked by checkDenyFlags) in front of b's decisions, and has POST
// /admin/v1/reset drop its entries after the stores are reset.
func addDenyCache(f serveFlags, b *backend) error {
	if f.denyEntries == 0 {
		return nil
	}
	dc, err := denycache.New(b.store, denycache.Options{MaxEntries: f.denyEntries, MaxTTL: f.denyMaxTTL})
	if err != nil {
		return fmt.Errorf("--deny-cache-entries: %w", err)
	}
	b.store, b.deny = dc, dc
	// Last, after the stores: dropped first, an entry could be learnt
	// again from a key not yet reset. A decision in flight across the
	// reset does not cache the denial it read before it (denycache
	// counts the Forget).
	b.resetters = append(b.resetters, denyResetter{dc})
	return nil
}

// denyResetter drops a reset's keys from the cache of denials. It reports
// no key as having held state: the keys' state is in the stores.
type denyResetter struct{ c *denycache.Store }

// ResetKeys forgets keys' cached denials.
func (r denyResetter) ResetKeys(_ context.Context, keys ...string) ([]bool, error) {
	for _, k := range keys {
		r.c.Forget(k)
	}
	return nil, nil
}
