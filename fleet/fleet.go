// Package fleet counts the live instances of a service that share one
// Redis, so that a per-instance fallback limit can be the shared limit
// divided by the instances really running rather than by a number set by
// hand.
//
// Every instance heartbeats into one sorted set: its id scored by the time
// of its last beat. A beat adds or refreshes the instance, drops the ones
// silent for longer than the TTL and returns how many are left, all in one
// short script; the set itself expires when every instance is gone. While
// Redis is down the last count seen is kept: that is the count a fallback
// needs.
package fleet

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/nilcheck"
)

// ErrInvalidOptions reports arguments New cannot use.
var ErrInvalidOptions = errors.New("fleet: invalid options")

//go:embed beat.lua
var beatLua string

var beatScript = redis.NewScript(beatLua)

// Bounds of Options.Interval and Options.TTL. An instance silent for a day
// is not live by any measure, and each one counted too many divides the
// local fallback's limits by one more: MaxTTL guards against a TTL typed in
// the wrong unit. MaxInterval is the longest Interval a TTL within MaxTTL
// can follow (the TTL must cover two beats).
const (
	MinInterval = 10 * time.Millisecond
	MaxInterval = MaxTTL / 2
	MaxTTL      = 24 * time.Hour
)

// Options configures a Heartbeat. The zero value is ready to use.
type Options struct {
	// Interval is the time between two beats in Run. Default 2s;
	// MinInterval (10ms) to MaxInterval (12h).
	Interval time.Duration
	// TTL is how long an instance that stopped beating still counts.
	// Default 3 × Interval, at most MaxTTL (24h); 2 × Interval to MaxTTL.
	TTL time.Duration
	// Now, if set, returns the time the beats are scored with. Default
	// (nil): Redis's own TIME, read in the beat's script, so that
	// instances whose clocks disagree still agree on who is live (scored
	// with its own clock, an instance 10 s ahead dropped every other one
	// from the set at each beat: outside walk).
	Now func() time.Time
	// OnCount, if set, receives the count after every successful beat.
	OnCount func(n int)
	// OnRejoin, if set, is called, before OnCount, by a beat that found
	// this instance missing from the set after an earlier beat had put it
	// there: the set was lost (a Redis restarted empty, a failover to a
	// replica without it) or this instance was silent for longer than the
	// TTL. The other instances are then coming back one beat at a time,
	// and the count is low until they all have.
	OnRejoin func()
	// OnError, if set, receives the error of every failed beat in Run.
	OnError func(err error)
	// AfterBeat, if set, is called by Run after every successful beat,
	// with the beat's context (its deadline one Interval after the
	// beat's start): another check of the same Redis at the same pace
	// (serve asks whether Redis restarted). It must not block past ctx.
	AfterBeat func(ctx context.Context)
	// Registerer, if set, receives the floodgate_instances_live gauge.
	Registerer prometheus.Registerer
}

// Client is the part of a go-redis v9 client a Heartbeat uses:
// *redis.Client, *redis.ClusterClient and the failover clients satisfy it.
type Client interface {
	redis.Scripter
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
}

// Heartbeat is one instance's membership of the fleet. It is safe for
// concurrent use.
type Heartbeat struct {
	client Client
	key    string
	id     string
	opts   Options
	count  atomic.Int64
	joined atomic.Bool // a beat has put this instance in the set
	gauge  prometheus.Gauge
}

// Key returns the sorted set the instances of floodgate serve under key
// prefix beat into, "<prefix>:instances" (doctor reads it too).
func Key(prefix string) string { return prefix + ":instances" }

// New returns the heartbeat of instance id into the sorted set key. It
// sends nothing. It refuses, with an error wrapping ErrInvalidOptions, a
// nil client (a nil *redis.Client in the interface included), an empty
// key or id, and options out of their documented bounds.
func New(client Client, key, id string, opts Options) (*Heartbeat, error) {
	switch {
	case nilcheck.IsNil(client):
		return nil, fmt.Errorf("%w: nil Redis client (%T)", ErrInvalidOptions, client)
	case key == "" || id == "":
		return nil, fmt.Errorf("%w: empty key or instance id", ErrInvalidOptions)
	case len(id) > 256:
		return nil, fmt.Errorf("%w: instance id of %d bytes (max 256)", ErrInvalidOptions, len(id))
	case opts.Interval != 0 && opts.Interval < MinInterval:
		return nil, fmt.Errorf("%w: interval %v below %v", ErrInvalidOptions, opts.Interval, MinInterval)
	case opts.Interval > MaxInterval:
		return nil, fmt.Errorf("%w: interval %v above %v (the TTL, at least 2 × interval, is at most %v)", ErrInvalidOptions, opts.Interval, MaxInterval, MaxTTL)
	}
	if opts.Interval == 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.TTL == 0 {
		opts.TTL = min(3*opts.Interval, MaxTTL)
	}
	if opts.TTL < 2*opts.Interval || opts.TTL > MaxTTL {
		return nil, fmt.Errorf("%w: TTL %v out of range 2 × interval (%v) to %v", ErrInvalidOptions, opts.TTL, 2*opts.Interval, MaxTTL)
	}
	h := &Heartbeat{client: client, key: key, id: id, opts: opts}
	if opts.Registerer != nil {
		h.gauge = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_instances_live",
			Help: "Instances heartbeating into Redis at the last successful beat (0 before the first).",
		})
		if err := opts.Registerer.Register(h.gauge); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
	}
	return h, nil
}

// Beat records this instance as alive now, forgets instances silent for
// longer than the TTL, and returns how many instances are alive (this one
// included).
func (h *Heartbeat) Beat(ctx context.Context) (int, error) {
	now := "" // Redis's TIME
	if h.opts.Now != nil {
		now = strconv.FormatInt(h.opts.Now().UnixMilli(), 10)
	}
	r, err := beatScript.Run(ctx, h.client, []string{h.key}, h.id, now, h.opts.TTL.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("fleet: heartbeat: %w", err)
	}
	if len(r) != 2 {
		return 0, fmt.Errorf("fleet: heartbeat: reply of %d values, want 2", len(r))
	}
	n, added := r[0], r[1] == 1
	// Any successful beat has put this instance in the set, whether or
	// not its reply said so (a first beat whose reply was lost).
	if was := h.joined.Swap(true); added && was && h.opts.OnRejoin != nil {
		h.opts.OnRejoin()
	}
	if n < 1 || n > 1_000_000 {
		return 0, fmt.Errorf("fleet: heartbeat: count %d out of range", n)
	}
	h.count.Store(n)
	if h.gauge != nil {
		h.gauge.Set(float64(n))
	}
	if h.opts.OnCount != nil {
		h.opts.OnCount(int(n))
	}
	return int(n), nil
}

// Count returns the count of the last successful beat, 0 before the first.
func (h *Heartbeat) Count() int { return int(h.count.Load()) }

// Leave removes this instance from the set, so that the others count one
// fewer at their next beat rather than after the TTL.
func (h *Heartbeat) Leave(ctx context.Context) error {
	if err := h.client.ZRem(ctx, h.key, h.id).Err(); err != nil {
		return fmt.Errorf("fleet: leaving: %w", err)
	}
	return nil
}

// Run beats at once and then every Interval until ctx ends, reporting
// failed beats to OnError and calling AfterBeat after the others, and
// returns ctx's error. Each beat is bounded
// by the Interval.
func (h *Heartbeat) Run(ctx context.Context) error {
	t := time.NewTicker(h.opts.Interval)
	defer t.Stop()
	for {
		bctx, cancel := context.WithTimeout(ctx, h.opts.Interval)
		_, err := h.Beat(bctx)
		if err == nil && h.opts.AfterBeat != nil {
			h.opts.AfterBeat(bctx)
		}
		cancel()
		if err != nil && ctx.Err() == nil && h.opts.OnError != nil {
			h.opts.OnError(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
