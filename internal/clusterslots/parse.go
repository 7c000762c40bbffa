package clusterslots

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// ErrNoEndpoint is the error of a CLUSTER SLOTS answer that names a node
// by no endpoint (NULL): the node runs cluster-preferred-endpoint-type
// unknown-endpoint, which asks clients to reach the node on the address
// they asked, and go-redis cannot (its parser failed on the NULL with a
// bare "redis: nil", and its MOVED handling would dial ":port", this host).
var ErrNoEndpoint = errors.New("the cluster announces no endpoint (cluster-preferred-endpoint-type unknown-endpoint): set it to ip or hostname (CONFIG SET cluster-preferred-endpoint-type ip on every node)")

// askSlots sends CLUSTER SLOTS through next as a generic command and fills
// sc with its answer, read with checks: go-redis's own parser stops at a
// NULL endpoint with redis.Nil, leaving the rest of the reply unread on
// the connection (which go-redis then drops).
func askSlots(ctx context.Context, next redis.ProcessHook, sc *redis.ClusterSlotsCmd) error {
	raw := redis.NewCmd(ctx, "cluster", "slots")
	if err := next(ctx, raw); err != nil {
		sc.SetErr(err)
		return err
	}
	slots, err := parseSlots(raw.Val())
	if err != nil {
		sc.SetErr(err)
		return err
	}
	sc.SetVal(slots)
	return nil
}

// parseSlots decodes a CLUSTER SLOTS reply read as a generic value. It
// fails with ErrNoEndpoint when a node has no endpoint, and with a
// description of the first malformed element otherwise.
func parseSlots(v any) ([]redis.ClusterSlot, error) {
	ranges, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("CLUSTER SLOTS: the reply is a %T, want an array", v)
	}
	out := make([]redis.ClusterSlot, 0, len(ranges))
	for i, r := range ranges {
		s, err := parseRange(r)
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS: range %d: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// parseRange decodes one range of a CLUSTER SLOTS reply: start, end, then
// the nodes serving it, primary first.
func parseRange(v any) (redis.ClusterSlot, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		return redis.ClusterSlot{}, fmt.Errorf("want an array of at least 2 elements, got %v", v)
	}
	start, ok1 := a[0].(int64)
	end, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return redis.ClusterSlot{}, fmt.Errorf("start and end are %T and %T, want integers", a[0], a[1])
	}
	s := redis.ClusterSlot{Start: int(start), End: int(end), Nodes: make([]redis.ClusterNode, 0, len(a)-2)}
	for _, n := range a[2:] {
		node, err := parseNode(n)
		if err != nil {
			return redis.ClusterSlot{}, fmt.Errorf("slots %d-%d: %w", start, end, err)
		}
		s.Nodes = append(s.Nodes, node)
	}
	return s, nil
}

// parseNode decodes one node of a CLUSTER SLOTS range: endpoint, port,
// and (Redis 4 and later) its id, then (Redis 7) its networking metadata,
// a map in RESP3 and a flat array of pairs in RESP2.
func parseNode(v any) (redis.ClusterNode, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		return redis.ClusterNode{}, fmt.Errorf("a node is %v, want an array of at least 2 elements", v)
	}
	if a[0] == nil {
		return redis.ClusterNode{}, ErrNoEndpoint
	}
	host, ok := a[0].(string)
	if !ok {
		return redis.ClusterNode{}, fmt.Errorf("a node's endpoint is a %T, want a string", a[0])
	}
	port, ok := a[1].(int64)
	if !ok {
		return redis.ClusterNode{}, fmt.Errorf("node %s: its port is a %T, want an integer", host, a[1])
	}
	n := redis.ClusterNode{Addr: net.JoinHostPort(host, strconv.FormatInt(port, 10))}
	if len(a) > 2 {
		n.ID, _ = a[2].(string)
	}
	if len(a) > 3 {
		n.NetworkingMetadata = metadata(a[3])
	}
	return n, nil
}

// metadata returns a node's networking metadata (hostname, ip) as
// strings, skipping entries that are not; nil when there are none.
func metadata(v any) map[string]string {
	out := map[string]string{}
	switch m := v.(type) {
	case map[any]any:
		for k, val := range m {
			ks, ok1 := k.(string)
			vs, ok2 := val.(string)
			if ok1 && ok2 {
				out[ks] = vs
			}
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			ks, ok1 := m[i].(string)
			vs, ok2 := m[i+1].(string)
			if ok1 && ok2 {
				out[ks] = vs
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
