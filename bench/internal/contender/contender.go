// Package contender adapts each rate limiter under comparison — Floodgate
// itself and the other Go limiters — to one operation signature,
// closedloop.Op, configured so that every decision takes the "allowed"
// write path: limits so high that nothing is ever denied during a run.
package contender

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/bench/internal/closedloop"
)

// ErrNilDependency reports a nil client or limiter given to an adapter.
var ErrNilDependency = errors.New("contender: nil client or limiter")

// OpenRate is the rate every bucket-style contender (GCRA, token bucket)
// gets: one unit per microsecond with a burst of an hour's worth, so that
// nothing is denied and Floodgate's emission interval is a whole
// microsecond.
const (
	OpenPeriod = time.Hour
	OpenLimit  = int64(OpenPeriod / time.Microsecond) // 3.6e9 per hour
)

// OpenPolicy returns a Floodgate policy of the given algorithm named name
// that admits everything a benchmark can send. Sliding log, whose state
// grows with each admitted request, gets its largest allowed limit over one
// minute; quota counts per calendar month (UTC).
func OpenPolicy(name string, a floodgate.Algorithm) (floodgate.Policy, error) {
	switch a {
	case floodgate.FixedWindow:
		return floodgate.NewFixedWindow(name, floodgate.MaxLimit, OpenPeriod)
	case floodgate.SlidingWindow:
		return floodgate.NewSlidingWindow(name, floodgate.MaxLimit, OpenPeriod)
	case floodgate.SlidingLog:
		return floodgate.NewSlidingLog(name, floodgate.MaxSlidingLogLimit, time.Minute)
	case floodgate.TokenBucket:
		return floodgate.NewTokenBucket(name, OpenLimit, OpenPeriod, 0)
	case floodgate.GCRA:
		return floodgate.NewGCRA(name, OpenLimit, OpenPeriod, 0)
	case floodgate.Quota:
		return floodgate.NewQuota(name, floodgate.MaxLimit, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	}
	return floodgate.Policy{}, fmt.Errorf("%w: algorithm %v", floodgate.ErrInvalidPolicy, a)
}

// Floodgate returns an Op deciding one request of cost 1 by the key's
// identity under p through l (so the Limiter builds the storage key on
// every call, as an application does).
func Floodgate(l *floodgate.Limiter, p floodgate.Policy) (closedloop.Op, error) {
	if l == nil {
		return nil, ErrNilDependency
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return func(ctx context.Context, key string) (bool, error) {
		r, err := l.Allow(ctx, p, key)
		return r.Allowed, err
	}, nil
}

// Layered returns an Op deciding a three-layer request in one store call:
// edge (a fixed window shared by every caller, identity "edge"), user (a
// per-identity policy of algorithm user) and a per-identity monthly quota.
// All limits are open.
func Layered(l *floodgate.Limiter, user floodgate.Algorithm) (closedloop.Op, error) {
	if l == nil {
		return nil, ErrNilDependency
	}
	edge, err := OpenPolicy("edge", floodgate.FixedWindow)
	if err != nil {
		return nil, err
	}
	per, err := OpenPolicy("user", user)
	if err != nil {
		return nil, err
	}
	quota, err := OpenPolicy("quota", floodgate.Quota)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, key string) (bool, error) {
		d, err := l.AllowLayers(ctx, 1,
			floodgate.LayerSpec{Policy: edge, Identity: "edge"},
			floodgate.LayerSpec{Policy: per, Identity: key},
			floodgate.LayerSpec{Policy: quota, Identity: key},
		)
		return d.Allowed, err
	}, nil
}
