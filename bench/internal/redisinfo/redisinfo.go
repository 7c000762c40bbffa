// Package redisinfo reads the server-side costs of a benchmark from Redis
// itself: CPU time (INFO cpu), per-command call counts and time (INFO
// commandstats) and the memory a set of keys takes (MEMORY USAGE).
package redisinfo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrBadInfo reports an INFO reply this package cannot read.
var ErrBadInfo = errors.New("redisinfo: unreadable INFO reply")

// CommandStat is one line of INFO commandstats.
type CommandStat struct {
	// Calls is how many times the command ran.
	Calls int64
	// Usec is the total server time it took, in microseconds.
	Usec int64
	// Failed counts calls that returned an error (failed_calls plus
	// rejected_calls), e.g. a script raising an error.
	Failed int64
}

// Snapshot is the server's cumulative counters at one moment.
type Snapshot struct {
	// CPUSeconds is used_cpu_user + used_cpu_sys of the server process
	// (main thread and any others), in seconds.
	CPUSeconds float64
	// Commands maps a lower-case command name (e.g. "evalsha") to its
	// counters.
	Commands map[string]CommandStat
}

// Take reads a Snapshot from c.
func Take(ctx context.Context, c redis.UniversalClient) (Snapshot, error) {
	cpu, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return Snapshot{}, fmt.Errorf("redisinfo: INFO cpu: %w", err)
	}
	cmds, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return Snapshot{}, fmt.Errorf("redisinfo: INFO commandstats: %w", err)
	}
	return Parse(cpu, cmds)
}

// Parse builds a Snapshot from the text of INFO cpu and INFO commandstats.
func Parse(cpuInfo, commandInfo string) (Snapshot, error) {
	var s Snapshot
	fields := infoFields(cpuInfo)
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(fields[f], 64)
		if err != nil {
			return Snapshot{}, fmt.Errorf("%w: %s = %q", ErrBadInfo, f, fields[f])
		}
		s.CPUSeconds += v
	}
	s.Commands = make(map[string]CommandStat)
	for name, v := range infoFields(commandInfo) {
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		var st CommandStat
		for part := range strings.SplitSeq(v, ",") {
			k, val, _ := strings.Cut(part, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(val, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(val, 10, 64)
			case "failed_calls", "rejected_calls":
				n, _ := strconv.ParseInt(val, 10, 64)
				st.Failed += n
			}
		}
		s.Commands[cmd] = st
	}
	return s, nil
}

// Cost is the server-side cost of the work done between two snapshots.
type Cost struct {
	// CPUSeconds is the server process's CPU time used.
	CPUSeconds float64
	// Calls, Usec and Failed are the named commands' calls, total time and
	// failed calls.
	Calls, Usec, Failed int64
}

// Diff returns the cost of what ran between before and after, counting the
// calls and time of the given commands (lower case, e.g. "evalsha", "eval").
func Diff(before, after Snapshot, commands ...string) Cost {
	c := Cost{CPUSeconds: after.CPUSeconds - before.CPUSeconds}
	for _, name := range commands {
		a, b := after.Commands[name], before.Commands[name]
		c.Calls += a.Calls - b.Calls
		c.Usec += a.Usec - b.Usec
		c.Failed += a.Failed - b.Failed
	}
	return c
}

// CPUPerOp returns the server CPU time per operation in microseconds, for
// ops operations (0 when ops is 0).
func (c Cost) CPUPerOp(ops uint64) float64 {
	if ops == 0 {
		return 0
	}
	return c.CPUSeconds * 1e6 / float64(ops)
}

// UsecPerCall returns the command's average server time in microseconds
// (0 when it was not called).
func (c Cost) UsecPerCall() float64 {
	if c.Calls == 0 {
		return 0
	}
	return float64(c.Usec) / float64(c.Calls)
}

// UsecPerOp returns the commands' server time per operation in
// microseconds, for ops operations (0 when ops is 0): with several
// decisions per script call, the script time each decision costs.
func (c Cost) UsecPerOp(ops uint64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(c.Usec) / float64(ops)
}

// MemoryUsage returns the sum of MEMORY USAGE (with every element sampled)
// over keys, in bytes. A missing key is an error: the caller measures keys
// it has just written.
func MemoryUsage(ctx context.Context, c redis.UniversalClient, keys ...string) (int64, error) {
	var total int64
	for _, k := range keys {
		n, err := c.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			if errors.Is(err, redis.Nil) {
				return 0, fmt.Errorf("redisinfo: MEMORY USAGE %q: no such key", k)
			}
			return 0, fmt.Errorf("redisinfo: MEMORY USAGE %q: %w", k, err)
		}
		total += n
	}
	return total, nil
}

// ServerVersion returns redis_version from INFO server.
func ServerVersion(ctx context.Context, c redis.UniversalClient) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redisinfo: INFO server: %w", err)
	}
	v := infoFields(info)["redis_version"]
	if v == "" {
		return "", fmt.Errorf("%w: no redis_version", ErrBadInfo)
	}
	return v, nil
}

func infoFields(info string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}
