package doctor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// clusterNode is one line of CLUSTER NODES: a node as the node asked
// sees it.
type clusterNode struct {
	id, addr string
	primary  bool
	failing  string // "fail" (agreed by a majority of primaries), "pfail" (this node's suspicion), or ""
	master   string // a replica's primary's id
	slots    []slotRange
}

// parseClusterNodes parses CLUSTER NODES output: "<id> <ip:port@cport[,hostname]>
// <flags> <master> <ping-sent> <pong-recv> <epoch> <link> <slot>...".
// Lines it cannot read are skipped; slots being moved ("[...]") are not
// counted as served.
func parseClusterNodes(out string) []clusterNode {
	var nodes []clusterNode
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		n := clusterNode{id: f[0], addr: addr, master: f[3]}
		flags := strings.Split(f[2], ",")
		n.primary = slices.Contains(flags, "master")
		switch {
		case slices.Contains(flags, "fail"):
			n.failing = "fail"
		case slices.Contains(flags, "fail?"):
			n.failing = "pfail"
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			a, b, ok := strings.Cut(s, "-")
			if !ok {
				b = a
			}
			start, err1 := strconv.Atoi(a)
			end, err2 := strconv.Atoi(b)
			if err1 == nil && err2 == nil && start <= end {
				n.slots = append(n.slots, slotRange{start, end})
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// role names a node's role for people.
func (n clusterNode) role() string {
	if n.primary {
		return "primary"
	}
	return "replica"
}

// clusterOutage is what one node's CLUSTER NODES says is unreachable:
// the nodes flagged fail or fail? (with their role), and the slots of
// each failing primary none of whose replicas is reachable, which no node
// can serve until the primary or a replica is back.
type clusterOutage struct {
	unreachable []string    // "127.0.0.1:7000 (primary, fail)"
	orphans     []string    // "0-5460 (primary 127.0.0.1:7000, fail; its only replica 127.0.0.1:7003, fail)"
	orphanSlots []slotRange // the slots of orphans
	failover    []string    // failing primaries a reachable replica can replace: "127.0.0.1:7001 (replica 127.0.0.1:7004 up)"
}

// outage reads nodes (one node's CLUSTER NODES, parsed) for the nodes
// flagged failing and the slots left without a reachable owner.
func outage(nodes []clusterNode) clusterOutage {
	var o clusterOutage
	for _, n := range nodes {
		if n.failing != "" {
			o.unreachable = append(o.unreachable, fmt.Sprintf("%s (%s, %s)", n.addr, n.role(), n.failing))
		}
	}
	for _, p := range nodes {
		if !p.primary || p.failing == "" || len(p.slots) == 0 {
			continue
		}
		var replicas, up []string
		for _, r := range nodes {
			if r.primary || r.master != p.id {
				continue
			}
			replicas = append(replicas, r.addr+", "+orUp(r.failing))
			if r.failing == "" {
				up = append(up, r.addr)
			}
		}
		if len(up) > 0 {
			o.failover = append(o.failover, fmt.Sprintf("%s (replica %s up)", p.addr, strings.Join(up, ", ")))
			continue
		}
		who := fmt.Sprintf("primary %s, %s", p.addr, p.failing)
		switch len(replicas) {
		case 0:
			who += "; no replica"
		case 1:
			who += "; its only replica " + replicas[0]
		default:
			who += "; its replicas " + strings.Join(replicas, "; ")
		}
		o.orphans = append(o.orphans, fmt.Sprintf("%s (%s)", joinRanges(p.slots, 5), who))
		o.orphanSlots = append(o.orphanSlots, p.slots...)
	}
	return o
}

func orUp(failing string) string {
	if failing == "" {
		return "up"
	}
	return failing
}

// slotCount is the number of slots in rs.
func slotCount(rs []slotRange) int {
	n := 0
	for _, r := range rs {
		n += r.end - r.start + 1
	}
	return n
}
