package doctor

import (
	"context"
	"strings"
	"testing"
)

// TestChecksOnSomePrimariesOnly: one Cluster primary of three does not
// answer INFO (stopped with SIGSTOP in the outside walk). The memory and
// persistence checks passed "every primary has headroom" on the two read.
// They now say 2 of 3 primaries were read, and warn.
func TestChecksOnSomePrimariesOnly(t *testing.T) {
	info := map[string]string{"maxmemory": "268435456", "used_memory": "1048576", "maxmemory_policy": "noeviction",
		"aof_enabled": "1", "rdb_last_bgsave_status": "ok", "aof_last_write_status": "ok", "role": "master", "connected_slaves": "1",
		"slave0": "ip=127.0.0.1,port=1,state=online,offset=1,lag=0"}
	r := &run{opts: Options{Prefix: "pp"}, counter: &counter{}, report: &Report{}, nodeCount: 3,
		primaryAddrs: []string{"a:1", "b:2"}, info: map[string]map[string]string{"a:1": info, "b:2": info}}
	for _, fn := range []func(*Check){r.checkMemory, r.checkEviction, func(c *Check) { r.checkReplication(context.Background(), c) }} {
		var c Check
		fn(&c)
		if c.Status != Warn || !strings.Contains(c.Summary, "only 2 of 3 primaries read") {
			t.Errorf("%+v", c)
		}
	}
}
