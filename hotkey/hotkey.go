// Package hotkey spreads one global limit over several keys, so that a
// limit shared by everyone (a whole server's 10,000 requests per minute)
// does not put every write on one hot Redis key, which would make one
// Redis node (one Cluster slot) the bottleneck of every request. A policy of limit L becomes N shard policies whose limits add up to
// L, each on its own key with its own hash tag, so that on Redis Cluster the
// shards land on different slots and usually different nodes. Each request
// is decided by one shard, picked round-robin or at random.
//
// Bounds on error, for the default SplitExact:
//
//   - Over-admission: none beyond the algorithm's own. The shard limits sum
//     to exactly L and each shard enforces its own, so in any of the
//     algorithm's windows the shards together admit at most L (for
//     FixedWindow, the algorithm's own 2× edge burst applies to the sum as
//     it would to one key). SplitCeil gives every shard ⌈L/N⌉ and can admit
//     up to N·⌈L/N⌉, less than L+N.
//   - Under-admission: a request is denied when its shard (and, with
//     Options.RetryOther, one more) lacks room, although other shards may
//     still have some. In the worst case, with all traffic landing on one
//     shard (possible with random picking), denials start after only
//     ⌊L/N⌋ units. Once traffic keeps reaching every shard (round-robin
//     does this by construction), each shard fills to within its largest
//     request cost, so at most N·(c_max−1) units of L stay unused, where
//     c_max is the largest cost; with cost-1 requests nothing is lost.
//     The package tests measure both with uneven traffic.
//
// Requests whose cost exceeds a shard's capacity are always denied, even
// when L could hold them: keep costs well below L/N.
package hotkey

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// MaxShards is the most shards a policy can be split into.
const MaxShards = 1024

// Split says how a limit is divided among shards.
type Split uint8

// The splits.
const (
	// SplitExact gives the shards ⌊L/N⌋ each and one more to the first
	// L mod N, so they sum to exactly L (same for Burst). The default.
	SplitExact Split = iota
	// SplitCeil gives every shard ⌈L/N⌉ (and ⌈Burst/N⌉): simpler shares,
	// at the price of admitting up to N·⌈L/N⌉ − L more than L.
	SplitCeil
)

// Pick says how a request's shard is chosen.
type Pick uint8

// The picks.
const (
	// PickRoundRobin cycles through the shards with an atomic counter
	// (per Limiter, so per process): traffic spreads evenly. The default.
	PickRoundRobin Pick = iota
	// PickRandom picks a shard uniformly at random.
	PickRandom
)

// Options configures a Limiter.
type Options struct {
	// Shards is the number of keys the limit is spread over, 1..MaxShards
	// and at most the policy's Limit (and Burst, when set). Required.
	Shards int
	// Split divides the limit; default SplitExact.
	Split Split
	// Pick chooses each request's shard; default PickRoundRobin.
	Pick Pick
	// RetryOther, when a shard denies, asks one other shard before
	// denying: fewer premature denials for a second round trip on denied
	// requests. Nothing is consumed by the first, denied, attempt.
	RetryOther bool
}

// Shards splits p into n shard policies (same name, algorithm and window)
// whose limits, and bursts when set, are divided as split says. It fails,
// wrapping floodgate.ErrInvalidPolicy, when p is invalid, n is out of
// 1..MaxShards, a share would be zero, or a shard's rate would be finer
// than its algorithm allows.
func Shards(p floodgate.Policy, n int, split Split) ([]floodgate.Policy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxShards {
		return nil, fmt.Errorf("%w: hotkey: %d shards out of range 1..%d", floodgate.ErrInvalidPolicy, n, MaxShards)
	}
	if split > SplitCeil {
		return nil, fmt.Errorf("%w: hotkey: unknown split %d", floodgate.ErrInvalidPolicy, split)
	}
	if p.Limit < int64(n) {
		return nil, fmt.Errorf("%w: hotkey: limit %d cannot be split over %d shards (each needs at least 1)", floodgate.ErrInvalidPolicy, p.Limit, n)
	}
	if p.Burst != 0 && p.Burst < int64(n) {
		return nil, fmt.Errorf("%w: hotkey: burst %d cannot be split over %d shards", floodgate.ErrInvalidPolicy, p.Burst, n)
	}
	out := make([]floodgate.Policy, n)
	for i := range out {
		sp := p
		sp.Limit = share(p.Limit, n, i, split)
		if p.Burst != 0 {
			sp.Burst = share(p.Burst, n, i, split)
		}
		if err := sp.Validate(); err != nil {
			return nil, fmt.Errorf("hotkey: shard %d of %d: %w", i, n, err)
		}
		out[i] = sp
	}
	return out, nil
}

func share(total int64, n, i int, split Split) int64 {
	q, r := total/int64(n), total%int64(n)
	if split == SplitCeil {
		if r > 0 {
			return q + 1
		}
		return q
	}
	if int64(i) < r {
		return q + 1
	}
	return q
}

// ShardIdentity returns the identity shard i of identity is stored under:
// identity + "#" + i. Because '#' is not kept readable by
// floodgate.EncodeIdentity, every shard gets its own hashed hash tag, so
// shards spread over Redis Cluster slots. Use a sharded policy only
// through a Limiter, never directly with identities of that form.
func ShardIdentity(identity string, i int) string { return identity + "#" + strconv.Itoa(i) }

// Limiter decides requests against a global policy spread over shards. It
// is safe for concurrent use.
type Limiter struct {
	lim    *floodgate.Limiter
	policy floodgate.Policy
	shards []floodgate.Policy
	opts   Options
	next   atomic.Uint64
}

// New returns a Limiter spreading p over opts.Shards keys decided by lim.
func New(lim *floodgate.Limiter, p floodgate.Policy, opts Options) (*Limiter, error) {
	if lim == nil {
		return nil, fmt.Errorf("%w: hotkey: nil limiter", floodgate.ErrInvalidPolicy)
	}
	if opts.Pick > PickRandom {
		return nil, fmt.Errorf("%w: hotkey: unknown pick %d", floodgate.ErrInvalidPolicy, opts.Pick)
	}
	shards, err := Shards(p, opts.Shards, opts.Split)
	if err != nil {
		return nil, err
	}
	return &Limiter{lim: lim, policy: p, shards: shards, opts: opts}, nil
}

// Policy returns the global policy.
func (l *Limiter) Policy() floodgate.Policy { return l.policy }

// ShardPolicies returns a copy of the shard policies.
func (l *Limiter) ShardPolicies() []floodgate.Policy {
	return append([]floodgate.Policy(nil), l.shards...)
}

// Result is the outcome of a sharded decision.
type Result struct {
	// Result is the deciding shard's result: its Limit and Remaining are
	// the shard's (e.g. 1,250 of a global 10,000 over 8 shards).
	floodgate.Result
	// Shard is the index of the deciding shard: the one that admitted the
	// request, or the last one asked.
	Shard int
	// Tries is 1, or 2 when RetryOther asked a second shard.
	Tries int
}

// Allow decides one request of cost 1 against identity's global limit, at
// the time of lim's clock.
func (l *Limiter) Allow(ctx context.Context, identity string) (Result, error) {
	return l.AllowN(ctx, identity, 1)
}

// AllowN decides one request of the given cost (0 peeks at one shard), at
// the time of lim's clock.
func (l *Limiter) AllowN(ctx context.Context, identity string, cost int64) (Result, error) {
	return l.decide(identity, func(p floodgate.Policy, id string) (floodgate.Result, error) {
		return l.lim.AllowN(ctx, p, id, cost)
	})
}

// AllowAt is AllowN at the given time.
func (l *Limiter) AllowAt(ctx context.Context, now time.Time, identity string, cost int64) (Result, error) {
	return l.decide(identity, func(p floodgate.Policy, id string) (floodgate.Result, error) {
		return l.lim.AllowAt(ctx, now, p, id, cost)
	})
}

func (l *Limiter) decide(identity string, allow func(floodgate.Policy, string) (floodgate.Result, error)) (Result, error) {
	i := l.pick()
	r, err := allow(l.shards[i], ShardIdentity(identity, i))
	if err != nil {
		return Result{}, fmt.Errorf("hotkey shard %d: %w", i, err)
	}
	if r.Allowed || !l.opts.RetryOther || len(l.shards) == 1 {
		return Result{Result: r, Shard: i, Tries: 1}, nil
	}
	j := l.other(i)
	r, err = allow(l.shards[j], ShardIdentity(identity, j))
	if err != nil {
		return Result{}, fmt.Errorf("hotkey shard %d (retry): %w", j, err)
	}
	return Result{Result: r, Shard: j, Tries: 2}, nil
}

// Layer returns the layer of a layered decision (floodgate.AllowLayers)
// for one shard of identity's global limit, picked like AllowN picks. A
// denied layered decision is not retried on another shard. On Redis
// Cluster the shard's key has its own hash tag, so it can share a decision
// only with layers in the same slot.
func (l *Limiter) Layer(identity string) floodgate.LayerSpec {
	i := l.pick()
	return floodgate.LayerSpec{Policy: l.shards[i], Identity: ShardIdentity(identity, i)}
}

func (l *Limiter) pick() int {
	n := uint64(len(l.shards))
	if l.opts.Pick == PickRandom {
		return int(rand.Uint64N(n))
	}
	return int((l.next.Add(1) - 1) % n)
}

// other returns a shard other than i: the next one for round-robin, a
// random other one for random picking.
func (l *Limiter) other(i int) int {
	n := len(l.shards)
	if l.opts.Pick == PickRandom {
		return (i + 1 + rand.IntN(n-1)) % n
	}
	return (i + 1) % n
}
