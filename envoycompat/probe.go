package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/internal/clusterslots"
	"github.com/floodgate-rl/floodgate/internal/redisnil"
)

// ProbeKey is the key RedisStore.Probe reads (GET): floodgate never
// writes it.
const ProbeKey = "floodgate-envoy-compat-health-probe"

// NodeError is a Redis Cluster primary that failed a probe (Probe).
type NodeError struct {
	// Addr is the primary's address, as the cluster's slot map names it.
	Addr string
	// Err is what the read of ProbeKey on it returned.
	Err error
}

// Error names the primary and its failure.
func (e *NodeError) Error() string {
	return fmt.Sprintf("redis cluster primary %s: %v", e.Addr, e.Err)
}

// Unwrap returns Err.
func (e *NodeError) Unwrap() error { return e.Err }

// Probe reports whether the store can decide, as envoy-compat's health
// check asks it: err is nil when Client, and PerSecond when set, each
// answer a read (GET of ProbeKey, bounded as Get is). Probe's calls are
// serialised.
//
// A Redis Cluster client answers when at least one of its primaries does:
// each primary of the slot map (listed again every probeRelist, or after
// a probe that saw one fail) is asked on its own connection, all at once,
// and one that answers the GET, or redirects it (MOVED or ASK: the key's
// slot is another primary's), serves the slots it holds; a primary
// replying CLUSTERDOWN (the cluster lost a primary and requires full
// coverage) or not reachable does not. down then names each primary that
// failed while another answered, in address order: the decisions on its
// slots fail, the others' are made. A cluster none of whose primaries
// answers (or whose slot map cannot be read) is err, joining each
// primary's failure in address order. The GET of a single key, which the
// probe used to be, asked only the primary of that key's slot (7639):
// with it down the service was unhealthy while the other primaries made
// two thirds of the decisions, and with another one down it stayed
// healthy.
func (s *RedisStore) Probe(ctx context.Context) (down []*NodeError, err error) {
	if s.Client == nil {
		return nil, errors.New("envoycompat: RedisStore.Client is nil")
	}
	for _, perSecond := range []bool{false, true} {
		if perSecond && s.PerSecond == nil {
			continue
		}
		c := s.client(perSecond)
		cc, ok := c.(*redis.ClusterClient)
		if !ok {
			if _, err := s.Get(ctx, []*Op{{Key: ProbeKey, PerSecond: perSecond}}); err != nil {
				return nil, err
			}
			continue
		}
		gctx, cancel := ctx, context.CancelFunc(func() {})
		if t := s.timeout(perSecond); t > 0 {
			gctx, cancel = context.WithTimeout(ctx, t)
		}
		s.probeMu.Lock()
		d, err := probeCluster(gctx, cc, &s.probes[b2i(perSecond)])
		s.probeMu.Unlock()
		cancel()
		if err != nil {
			return nil, err
		}
		down = append(down, d...)
	}
	return down, nil
}

// probeRelist is how long Probe asks the same Cluster primaries before
// it lists them again from a freshly loaded slot map (CLUSTER SLOTS):
// sooner after a probe that saw a primary fail or a node client closed.
const probeRelist = 30 * time.Second

// probeTargets is the primaries a Cluster client's probes ask, as
// listed last.
type probeTargets struct {
	listed time.Time
	nodes  []*redis.Client
	stale  bool // relist at the next probe
}

// probeCluster asks every primary of cc's slot map for ProbeKey (GET) on
// its own connection: the primaries that failed, and an error when none
// answered. The primaries are listed again (t) every probeRelist and
// after a probe that saw one fail: listed at each probe, each probe cost
// a CLUSTER SLOTS. ProbeKey is one key, in one primary's slots: the
// others answer MOVED, counted in their errorstat_MOVED; it stays one
// key because the ACL docs/operations.md gives envoy-compat names it.
func probeCluster(ctx context.Context, cc *redis.ClusterClient, t *probeTargets) ([]*NodeError, error) {
	if t.nodes == nil || t.stale || time.Since(t.listed) >= probeRelist {
		nodes, err := clusterslots.Primaries(ctx, cc)
		if err != nil {
			return nil, err
		}
		t.nodes, t.listed, t.stale = nodes, time.Now(), false
	}
	var mu sync.Mutex
	var down []*NodeError
	var wg sync.WaitGroup
	for _, n := range t.nodes {
		wg.Go(func() {
			err := n.Get(ctx, ProbeKey).Err()
			if err == nil || redisnil.IsReply(err) || isRedirect(err) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			t.stale = true
			if !errors.Is(err, redis.ErrClosed) { // a node that left the cluster, not down
				down = append(down, &NodeError{Addr: n.Options().Addr, Err: err})
			}
		})
	}
	wg.Wait()
	// In address order, whichever answered first: an error naming them
	// in another order is the same outage, logged once.
	slices.SortFunc(down, func(a, b *NodeError) int { return strings.Compare(a.Addr, b.Addr) })
	if len(down) == len(t.nodes) {
		errs := make([]error, len(down))
		for i, d := range down {
			errs[i] = d
		}
		reloadSlots(cc)
		return nil, fmt.Errorf("redis cluster: no primary answered: %w", errors.Join(errs...))
	}
	if len(down) > 0 {
		// A primary replaced by its replica is still in a stale map.
		reloadSlots(cc)
	}
	return down, nil
}

// isRedirect reports a Cluster redirection (MOVED or ASK): the node
// answered, for a slot it does not hold.
func isRedirect(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
