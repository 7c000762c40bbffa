package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// prefixSeq makes prefixes unique within one test binary run.
var prefixSeq atomic.Int64

// uniquePrefix returns a key prefix no other test (or run) uses, derived
// from the test's name.
func uniquePrefix(t testing.TB) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '.'
	}, t.Name())
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	p := fmt.Sprintf("fgt:%s:%x.%d", name, time.Now().UnixNano()&0xffffffffff, prefixSeq.Add(1))
	if err := floodgate.ValidatePrefix(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// env is a Store on a private Redis (standalone or cluster) that records,
// for every key it wrote, the longest TTL its policy allows, and audits at
// cleanup that every key under its prefix has a TTL within that bound.
type env struct {
	store  *Store
	client Client  // the client store decides on
	opts   Options // the options it was made with
	prefix string
	// nodes are the primaries, for SCAN in the audit.
	nodes []*redis.Client
	// rd reads keys directly (GET, DUMP, PTTL...): the server, or the
	// cluster client, which finds the node of each key.
	rd    redis.Cmdable
	mu    sync.Mutex
	bound map[string]time.Duration // key → longest TTL its policy needs
}

// newEnv starts a private redis-server and returns an env on it.
func newEnv(t testing.TB, extraArgs ...string) (*env, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t, extraArgs...)
	c := srv.Client(t)
	return newEnvOn(t, c, []*redis.Client{c}, Options{}), srv
}

// stateFormats are the formats the behaviour tests run a Store with.
var stateFormats = []StateFormat{BinaryState, TextState}

// forEachFormat runs f as a subtest per state format, each with its own
// env (and prefix) on one private redis-server.
func forEachFormat(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, format := range stateFormats {
		t.Run(format.String(), func(t *testing.T) {
			f(t, newEnvOn(t, c, []*redis.Client{c}, Options{StateFormat: format}))
		})
	}
}

// newEnvOn returns an env deciding on client, whose primaries are nodes.
func newEnvOn(t testing.TB, client Client, nodes []*redis.Client, opts Options) *env {
	t.Helper()
	s, err := New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{store: s, client: client, opts: opts, prefix: uniquePrefix(t), nodes: nodes, rd: nodes[0], bound: map[string]time.Duration{}}
	t.Cleanup(func() { e.auditTTL(t) })
	return e
}

// decide calls Store.Decide and records the keys' TTL bounds.
func (e *env) decide(ctx context.Context, now int64, layers []floodgate.Layer) ([]floodgate.Result, error) {
	out := make([]floodgate.Result, len(layers))
	err := e.store.Decide(ctx, now, layers, out)
	e.mu.Lock()
	for _, l := range layers {
		e.bound[l.Key] = ttlBound(l.Policy)
	}
	e.mu.Unlock()
	return out, err
}

// one decides a single layer.
func (e *env) one(ctx context.Context, now int64, p floodgate.Policy, key string, cost int64) (floodgate.Result, error) {
	out, err := e.decide(ctx, now, []floodgate.Layer{{Policy: p, Key: key, Cost: cost}})
	if err != nil {
		return floodgate.Result{}, err
	}
	return out[0], nil
}

// key returns the storage key of identity under p in this env.
func (e *env) key(p floodgate.Policy, identity string) string {
	return floodgate.Key(e.prefix, p, identity)
}

// decider adapts the env to the shared vectors.
func (e *env) decider() vectors.Decider {
	return func(ctx context.Context, now time.Time, p floodgate.Policy, id string, cost int64) (floodgate.Result, error) {
		return e.one(ctx, now.UnixMicro(), p, algo.KeyAt(e.prefix, p, id, now.UnixMicro()), cost)
	}
}

// ttlBound is the longest TTL a key of policy p may carry, plus
// algo.TTLSlack and a millisecond of rounding: the window for windows (two for the sliding
// window counter), burst × interval for buckets (plus MaxDelay for GCRA),
// which a bucket's TTL may outlive by as much again, at most its window.
func ttlBound(p floodgate.Policy) time.Duration {
	w := p.Window
	var d time.Duration
	switch p.Algorithm {
	case floodgate.Quota:
		d = 32*24*time.Hour + algo.QuotaGrace // the longest period, plus grace
	case floodgate.FixedWindow, floodgate.SlidingLog:
		d = w
	case floodgate.SlidingWindow:
		d = 2 * w
	default:
		b := p.Burst
		if b == 0 {
			b = p.Limit
		}
		d = time.Duration(b*(w.Microseconds()/p.Limit))*time.Microsecond + p.MaxDelay
		// A bucket's TTL is written for twice the life its state needs,
		// at most its window more (see ttlEnd).
		life := max(d, time.Millisecond) + algo.TTLSlack
		return life + min(life, w) + time.Millisecond
	}
	return max(d, time.Millisecond) + algo.TTLSlack + time.Millisecond
}

// auditTTL scans every primary for keys under the env's prefix and checks
// that each has a TTL (never -1, "no expiry") no longer than its policy
// needs, and that each was written by this env.
func (e *env) auditTTL(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := 0
	for _, n := range e.nodes {
		iter := n.Scan(ctx, 0, e.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			seen++
			ttl, err := n.PTTL(ctx, key).Result()
			if err != nil {
				t.Errorf("PTTL %q: %v", key, err)
				continue
			}
			bound, ok := e.bound[key]
			if !ok && strings.Contains(key, ":rel:") {
				bound, ok = releaseMarkerTTL+time.Millisecond, true // a release's marker
			}
			if base, isJournal := strings.CutSuffix(key, ":rq"); !ok && isJournal {
				// A bucket's release journal takes its bucket's TTL (a
				// marker's when the bucket had none).
				if b, tagged := strings.CutPrefix(base, "{"); tagged && strings.HasSuffix(b, "}") && e.bound[base] == 0 {
					base = strings.TrimSuffix(b, "}")
				}
				bound, ok = e.bound[base], e.bound[base] > 0
				bound = max(bound, releaseMarkerTTL+time.Millisecond)
			}
			switch {
			case ttl == -2: // expired since SCAN returned it
			case ttl < 0:
				t.Errorf("TTL audit: key %q has no TTL (PTTL %v)", key, ttl)
			case !ok:
				t.Errorf("TTL audit: key %q was not written through this env", key)
			case ttl > bound:
				t.Errorf("TTL audit: key %q has TTL %v, longer than its policy needs (%v)", key, ttl, bound)
			}
		}
		if err := iter.Err(); err != nil {
			t.Errorf("SCAN: %v", err)
		}
	}
	t.Logf("TTL audit: %d keys under %s checked", seen, e.prefix)
}

// noImmortalKeys fails t if any key under the env's prefix, on any
// primary, has no TTL (redistest.AuditTTL). The concurrency tests call it
// after each run; auditTTL checks the same and the bounds at cleanup.
func (e *env) noImmortalKeys(t testing.TB) {
	t.Helper()
	n := 0
	for _, c := range e.nodes {
		n += redistest.AuditTTL(t, c, e.prefix+":*")
	}
	t.Logf("no key without a TTL among %d under %s", n, e.prefix)
}

// mustPolicy fails the test on an invalid policy.
func mustPolicy(t testing.TB, p floodgate.Policy) floodgate.Policy {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// allAlgorithms returns one policy per algorithm with the given limit per
// window (burst = limit for the buckets).
func allAlgorithms(t testing.TB, limit int64, window time.Duration) []floodgate.Policy {
	t.Helper()
	var ps []floodgate.Policy
	for a := floodgate.FixedWindow; a <= floodgate.GCRA; a++ {
		ps = append(ps, mustPolicy(t, floodgate.Policy{Name: "p-" + a.String(), Algorithm: a, Limit: limit, Window: window}))
	}
	return ps
}

// scriptFor returns the BinaryState script that decides layers (see
// scriptSet.scriptFor).
func scriptFor(layers []floodgate.Layer) *luascript.Script {
	return scriptSets[BinaryState].scriptFor(layers)
}

// asText returns state v in the text format: v itself if it is text (or
// not a state), its numbers as text if it is a binary state of one of
// stateLayouts.
func asText(v string) string {
	for _, l := range stateLayouts {
		if len(v) == l.size() && v[0] == l.tag {
			nums := make([]string, l.text) // the text layout's numbers, the first
			for i := range nums {
				f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[1+8*i : 9+8*i])))
				nums[i] = strconv.FormatFloat(f, 'f', -1, 64)
			}
			return strings.Join(nums, " ")
		}
	}
	return v
}
