package servicebench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU accounting. Every process of a cell is charged the user+system time
// the kernel counted for it over the measured window, read before and
// after: the service and its redis-server from /proc/<pid>/stat (all their
// threads, in clock ticks of 10 ms), the load generator (this process)
// from getrusage (microseconds), and the whole machine from the "cpu" line
// of /proc/stat, so that what the machine did besides the three shows as
// "other".

// clockTick is the unit of /proc/<pid>/stat and /proc/stat times on Linux
// (USER_HZ is 100 on every architecture Go supports there).
const clockTick = 10 * time.Millisecond

// parsePidStat returns utime+stime of a /proc/<pid>/stat line: fields 14
// and 15, counted from the end of the command name, which sits between
// parentheses and may itself hold spaces and parentheses.
func parsePidStat(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("servicebench: /proc/<pid>/stat: no command name in %q", clipText(stat))
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("servicebench: /proc/<pid>/stat: %d fields after the command name, want 13 or more", len(f))
	}
	var sum time.Duration
	for _, k := range []int{11, 12} {
		v, err := strconv.ParseUint(f[k], 10, 63)
		if err != nil {
			return 0, fmt.Errorf("servicebench: /proc/<pid>/stat: field %d: %w", k+3, err)
		}
		sum += time.Duration(v) * clockTick
	}
	return sum, nil
}

// parseMachineStat returns the busy time of the machine (user, nice,
// system, irq and softirq of all CPUs: everything but idle, iowait and
// steal) from the first line of /proc/stat.
func parseMachineStat(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("servicebench: /proc/stat: want a cpu line of 7 times or more, got %q", clipText(line))
	}
	var busy time.Duration
	for i, name := range []string{"user", "nice", "system", "idle", "iowait", "irq", "softirq"} {
		v, err := strconv.ParseUint(f[i+1], 10, 63)
		if err != nil {
			return 0, fmt.Errorf("servicebench: /proc/stat: %s: %w", name, err)
		}
		if name != "idle" && name != "iowait" {
			busy += time.Duration(v) * clockTick
		}
	}
	return busy, nil
}

// procCPU returns the user+system time of process pid so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("servicebench: CPU time of pid %d: %w", pid, err)
	}
	return parsePidStat(string(b))
}

// machineBusy returns the machine's busy time so far.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("servicebench: machine CPU time: %w", err)
	}
	return parseMachineStat(string(b))
}

// selfCPU returns this process's user+system time so far.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("servicebench: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// cpuSample is the CPU time of a cell's processes and of the machine at
// one instant.
type cpuSample struct {
	service, redis, loadgen, machine time.Duration
}

// sampleCPU reads a sample for the service of pid svc and the
// redis-server of pid redis.
func sampleCPU(svc, redis int) (cpuSample, error) {
	var s cpuSample
	var err error
	if s.service, err = procCPU(svc); err != nil {
		return s, err
	}
	if s.redis, err = procCPU(redis); err != nil {
		return s, err
	}
	if s.loadgen, err = selfCPU(); err != nil {
		return s, err
	}
	s.machine, err = machineBusy()
	return s, err
}

// CPU is what each process used over a measured window.
type CPU struct {
	// Service, Redis and Loadgen are the user+system time of the service
	// process, its redis-server and the load generator.
	Service, Redis, Loadgen time.Duration
	// Other is the machine's busy time the three do not account for:
	// other processes, and interrupt time charged to no process. Never
	// negative (the tick-granular counters can cross by a tick).
	Other time.Duration
}

// cpuBetween returns the CPU used between two samples.
func cpuBetween(a, b cpuSample) CPU {
	c := CPU{Service: b.service - a.service, Redis: b.redis - a.redis, Loadgen: b.loadgen - a.loadgen}
	c.Other = max(b.machine-a.machine-c.Service-c.Redis-c.Loadgen, 0)
	return c
}

func clipText(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
