package suite

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The load average after a run mostly counts the run itself, so it cannot
// say whether other work competed with it. What can is the machine's CPU
// time over the run (/proc/stat) less what the harness, its redis-server
// and the redis-benchmark runs it waited for used: the rest went to other
// processes. /proc/stat also says how much time the hypervisor gave to
// other guests while this one wanted to run (steal), the noise a shared
// virtual machine adds.

// userHZ is the unit of /proc/stat and /proc/<pid>/stat times on Linux
// (USER_HZ, 100 on every architecture Go supports there).
const userHZ = 100

// cpuSample is the machine's and this run's own CPU time at one instant,
// in 1/userHZ seconds.
type cpuSample struct {
	busy, steal, total uint64 // the machine: not idle, stolen, all
	own                uint64 // the harness, its waited-for children and its redis-server
}

// takeCPUSample reads a sample, with the redis-server of pid; ok is false
// where /proc is not there to read.
func takeCPUSample(pid int) (s cpuSample, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, false
	}
	if s.busy, s.steal, s.total, err = parseProcStat(string(b)); err != nil {
		return s, false
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, false
	}
	server, err := parsePidStat(string(b))
	if err != nil {
		return s, false
	}
	var self, children syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) != nil || syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children) != nil {
		return s, false
	}
	s.own = server + ticks(self.Utime) + ticks(self.Stime) + ticks(children.Utime) + ticks(children.Stime)
	return s, true
}

func ticks(tv syscall.Timeval) uint64 {
	return uint64(tv.Sec)*userHZ + uint64(tv.Usec)/(1_000_000/userHZ)
}

// cpuShares returns the shares (0..1) of the machine's CPU time between
// two samples that went to other processes and to other guests (steal);
// ok is false when a counter went backwards (the kernel does not promise
// that idle and steal never do) or no time passed.
func cpuShares(a, b cpuSample) (other, steal float64, ok bool) {
	total := int64(b.total) - int64(a.total)
	busy := int64(b.busy) - int64(a.busy)
	st := int64(b.steal) - int64(a.steal)
	own := int64(b.own) - int64(a.own)
	if total <= 0 || busy < 0 || st < 0 || own < 0 {
		return 0, 0, false
	}
	other = min(float64(max(busy-own, 0))/float64(total), 1)
	steal = min(float64(st)/float64(total), 1)
	return other, steal, true
}

// parseProcStat reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal (guest time is inside user and
// nice). busy is user+nice+system: interrupt time is left out, since the
// run's own loopback traffic is much of it and no process is charged
// for it (nor, with IRQ time accounting, for softirqs run in its syscalls).
func parseProcStat(stat string) (busy, steal, total uint64, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0, fmt.Errorf("suite: /proc/stat: want a cpu line of 8 times or more, got %q", line)
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("suite: /proc/stat: field %d: %w", i+1, err)
		}
		total += v[i]
	}
	return v[0] + v[1] + v[2], v[7], total, nil
}

// parsePidStat returns utime+stime of a /proc/<pid>/stat line: fields 14
// and 15, counted after the command name, which is in parentheses and may
// itself hold spaces and parentheses.
func parsePidStat(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("suite: /proc/<pid>/stat: no command name in %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("suite: /proc/<pid>/stat: %d fields after the command name, want 13 or more", len(f))
	}
	u, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("suite: /proc/<pid>/stat: utime: %w", err)
	}
	s, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("suite: /proc/<pid>/stat: stime: %w", err)
	}
	return u + s, nil
}

// selfCPU returns this process's CPU time (user+sys), 0 if getrusage
// fails.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perOp returns d per operation in µs, 0 when there were none or d is not
// positive (not measured).
func perOp(d time.Duration, ops uint64) float64 {
	if ops == 0 || d <= 0 {
		return 0
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(ops)
}
