package envoycompat

import (
	"fmt"
	"sort"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Match returns the limit that applies to one request descriptor of
// domain, or nil when none does (an unknown domain included), following
// envoyproxy/ratelimit's lookup: a limit override sent with the descriptor
// wins; otherwise each entry is looked up in turn at its level as
// "key_value", then against the level's wildcard composite keys in load
// order (the first match wins), then as "key" alone; the walk stops at a
// node without children; a limit applies only when it sits on the node
// reached by the last entry. The returned Limit may be shared: do not
// modify it.
func (c *Config) Match(domain string, desc *ratelimitv3.RateLimitDescriptor) *Limit {
	d := c.domains[domain]
	if d == nil {
		return nil
	}
	if o := desc.GetLimit(); o != nil {
		key := overrideKey(domain, desc)
		return &Limit{
			StatKey: key,
			domain:  domain,
			Proto:   &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit())},
		}
	}
	entries := desc.GetEntries()
	level := d
	var found *Limit
	var share map[int]string
	detailed := strings.Builder{}
	detailed.WriteString(domain)
	valued := strings.Builder{}
	valued.WriteString(domain)
	for i, e := range entries {
		ck := e.GetKey() + "_" + e.GetValue()
		detailed.WriteString(".")
		detailed.WriteString(ck)
		next := level.children[ck]
		wildKey := ""
		if next == nil {
			for _, w := range level.wild {
				if wildcardMatch(w.parts, ck) {
					next, wildKey = level.children[w.key], w.key
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = level.children[e.GetKey()]
		}
		if wildKey != "" && next != nil && next.shareThreshold && next.pattern != "" {
			if share == nil {
				share = map[int]string{}
			}
			share[i] = strings.TrimPrefix(next.pattern, e.GetKey()+"_")
		}
		valued.WriteString(".")
		if next != nil {
			v := ""
			switch {
			case wildKey != "" && share[i] != "":
				v = share[i]
			case wildKey != "" && next.valueToMetric:
				v = e.GetValue()
			case wildKey != "":
				v = strings.TrimPrefix(wildKey, e.GetKey()+"_")
			case byValue:
				v = e.GetValue()
			case next.valueToMetric:
				v = e.GetValue()
			}
			valued.WriteString(e.GetKey())
			if v != "" {
				valued.WriteString("_")
				valued.WriteString(v)
			}
		} else {
			valued.WriteString(e.GetKey())
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			l := *next.limit
			if len(share) > 0 {
				l.sharePattern = make([]string, len(entries))
				for j, p := range share {
					l.sharePattern[j] = p
				}
			}
			found = &l
		}
		if next == nil || len(next.children) == 0 {
			if found != nil && found.DetailedMetric {
				// theirs rebuilds the limit here, without its metadata
				found.Metadata = nil
			}
			break
		}
		level = next
	}
	if found == nil {
		return nil
	}
	found.domain = domain
	switch {
	case found.DetailedMetric && len(found.sharePattern) > 0:
		var b strings.Builder
		b.WriteString(domain)
		for i, e := range entries {
			b.WriteString(".")
			b.WriteString(e.GetKey())
			if p := found.sharePattern[i]; p != "" {
				b.WriteString("_")
				b.WriteString(p)
			} else if e.GetValue() != "" {
				b.WriteString("_")
				b.WriteString(e.GetValue())
			}
		}
		found.metricKey = b.String()
	case found.DetailedMetric:
		found.metricKey = detailed.String()
	case valued.String() != found.StatKey:
		// theirs rebuilds the limit for the new key, without its metadata
		found.metricKey = valued.String()
		found.Metadata = nil
	}
	return found
}

// overrideKey is the stats key of a limit override: the domain and the
// descriptor's entries.
func overrideKey(domain string, desc *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteString(".")
	for i, e := range desc.GetEntries() {
		if i > 0 {
			b.WriteString(".")
		}
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteString("_")
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}

// Dump describes every configured limit, one line each (sorted), as the
// debug endpoint /rlconfig shows it: the stats key, unit,
// requests_per_unit, shadow_mode and quota_mode.
func (c *Config) Dump() string {
	var lines []string
	var walk func(n *node)
	walk = func(n *node) {
		if l := n.limit; l != nil {
			lines = append(lines, fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
				l.StatKey, l.Proto.GetUnit(), l.Proto.GetRequestsPerUnit(), l.Shadow, l.Quota))
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, d := range c.domains {
		walk(d)
	}
	sort.Strings(lines)
	return strings.Join(lines, "")
}
