package doctor

import (
	"strings"
	"testing"
)

// TestOutage reads CLUSTER NODES as a survivor prints it: a primary and
// its only replica failed (their slots have no reachable owner), a
// primary suspected (fail?) whose replica is up (a failover can replace
// it), a healthy primary.
func TestOutage(t *testing.T) {
	const nodes = `a1 127.0.0.1:7000@17000 master,fail - 0 0 1 disconnected 0-5460
a2 127.0.0.1:7003@17003 slave,fail a1 0 0 1 disconnected
b1 127.0.0.1:7001@17001 master,fail? - 0 0 2 connected 5461-10922
b2 127.0.0.1:7004@17004,host-b slave b1 0 0 2 connected
c1 127.0.0.1:7002@17002 myself,master - 0 0 3 connected 10923-16383 [16000->-b1]
`
	o := outage(parseClusterNodes(nodes))
	if got, want := strings.Join(o.unreachable, ", "), "127.0.0.1:7000 (primary, fail), 127.0.0.1:7003 (replica, fail), 127.0.0.1:7001 (primary, pfail)"; got != want {
		t.Errorf("unreachable %q, want %q", got, want)
	}
	if got, want := strings.Join(o.orphans, "; "), "0-5460 (primary 127.0.0.1:7000, fail; its only replica 127.0.0.1:7003, fail)"; got != want {
		t.Errorf("orphans %q, want %q", got, want)
	}
	if got, want := strings.Join(o.failover, "; "), "127.0.0.1:7001 (replica 127.0.0.1:7004 up)"; got != want {
		t.Errorf("failover %q, want %q", got, want)
	}
	if got := slotCount(o.orphanSlots); got != 5461 {
		t.Errorf("orphan slots %d, want 5461", got)
	}
}
