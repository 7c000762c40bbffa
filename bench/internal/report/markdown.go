package report

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Markdown returns the run's results as Markdown: machine and settings,
// the main throughput table with ratios to redis_rate, latencies, server
// cost, redis-benchmark, algorithms, memory per identity, in-memory
// limiters, the flood, and the targets. chart, when not empty, is the path
// of the SVG chart relative to the Markdown file.
func Markdown(r *Run, chart string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("Run of %s, %s in all.\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Elapsed.Round(time.Second))
	m := r.Machine
	w("| machine | |\n|---|---|\n")
	w("| CPU | %s, %d logical CPUs (GOMAXPROCS %d) |\n", mdEscape(m.CPUModel), m.CPUs, m.GOMAXPROCS)
	w("| OS | %s/%s |\n", m.OS, m.Arch)
	w("| Go | %s |\n", m.GoVersion)
	w("| Redis | %s (redis-server on loopback, sharing the CPUs with the client) |\n", m.RedisVersion)
	w("| redis-benchmark | %s |\n", m.RedisBenchmarkVersion)
	w("| load average (1 min) before / after the run | %.2f / %.2f (the second counts the run itself) |\n", m.LoadBefore, m.LoadAfter)
	if m.CPUShares {
		w("| CPU time taken during the run by other processes / by other virtual machines (steal) | %.1f %% / %.1f %% |\n", 100*m.OtherCPU, 100*m.StealCPU)
	}
	w("\n")
	// The CPU shares say what competed with the run itself; the load
	// average before it, where they are not measured, only what ran in the
	// minute before (often the previous run).
	var busy []string
	if !m.CPUShares && m.CPUs > 0 && m.LoadBefore > 0.5*float64(m.CPUs) {
		busy = append(busy, fmt.Sprintf("load average %.1f on %d CPUs when it started", m.LoadBefore, m.CPUs))
	}
	if m.CPUShares && m.OtherCPU > 0.05 {
		busy = append(busy, fmt.Sprintf("%.0f %% of the CPU time went to other processes", 100*m.OtherCPU))
	}
	if m.CPUShares && m.StealCPU > 0.05 {
		busy = append(busy, fmt.Sprintf("the hypervisor gave %.0f %% of the CPU time to other virtual machines", 100*m.StealCPU))
	}
	if len(busy) > 0 {
		w("**Warning: this run competed with other work (%s); the absolute numbers are low and noisy, "+
			"and even the ratios are less reliable than on a quiet machine.**\n\n", strings.Join(busy, "; "))
	}
	s := r.Settings
	w("Command: `%s`. Closed loop: each cell runs N goroutines back to back for %v after %v of warm-up, "+
		"over %d random identities, every decision on the allowed write path (open limits). ",
		s.Command, s.Duration, s.Warmup, s.Keys)
	if s.Rounds > 1 {
		w("The main matrix was measured %d times, concurrency by concurrency; each cell is its median round. ", s.Rounds)
	} else {
		w("The main matrix runs concurrency by concurrency, every contender in turn, so the cells a ratio compares are measured within a minute of each other. ")
	}
	if s.PoolSize == 0 {
		w("Plain go-redis clients use go-redis's default pool (10 connections per GOMAXPROCS).\n\n")
	} else {
		w("Plain go-redis clients use a pool of %d connections.\n\n", s.PoolSize)
	}

	if chart != "" {
		w("![decisions/s and p99 latency against concurrency](%s)\n\n", chart)
	}

	w("### Decisions per second (ratio to redis_rate at the same concurrency)\n\n")
	header(&b, "setup", s.Concurrency, "")
	base, hasBase := r.Series(RedisRate)
	for _, se := range r.Redis {
		w("| %s |", mdEscape(se.Name))
		for _, c := range s.Concurrency {
			cell, ok := se.At(c)
			if !ok {
				w(" – |")
				continue
			}
			w(" %s", rate(cell.PerSecond))
			if hasBase && se.ID != RedisRate {
				if bc, ok := base.At(c); ok && bc.PerSecond > 0 {
					w(" (%.2f×)", cell.PerSecond/bc.PerSecond)
				}
			}
			w(" |")
		}
		w("\n")
	}
	w("\n")
	if bad := anomalies(r); bad != "" {
		w("%s\n", bad)
	}

	w("### Latency per decision, p50 / p99 (ms)\n\n")
	header(&b, "setup", s.Concurrency, "")
	for _, se := range r.Redis {
		w("| %s |", mdEscape(se.Name))
		for _, c := range s.Concurrency {
			if cell, ok := se.At(c); ok {
				w(" %s / %s |", ms(cell.P50), ms(cell.P99))
			} else {
				w(" – |")
			}
		}
		w("\n")
	}
	w("\n")

	top := r.MaxWorkers()
	w("### Redis server and client cost per decision\n\n")
	w("Server CPU is the redis-server process's user+sys time (INFO cpu) divided by decisions: it includes reading and writing the sockets, " +
		"so pipelining lowers it. Client CPU is the harness process's user+sys time (getrusage) divided by decisions: the callers, " +
		"the limiter, the Redis client and its syscalls. On a machine whose cores the client and the server share, the two added " +
		"are what a decision costs, and they move far less with the machine's load than decisions/s. " +
		"Script time is INFO commandstats' time of EVALSHA (the script alone), per decision and per call: " +
		"Floodgate coalesces concurrent decisions into one script call, so one call may decide several.\n\n")
	w("| setup | callers | server CPU µs/decision | client CPU µs/decision | script µs/decision | script µs/call | decisions/call |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range s.Concurrency {
		if n != 1 && n != top {
			continue
		}
		for _, se := range r.Redis {
			if c, ok := se.At(n); ok {
				w("| %s | %d | %.1f | %.1f | %s | %s | %.1f |\n", mdEscape(se.Name), n, c.CPUPerOp, c.ClientCPUPerOp, usec(c.ScriptUsecPerOp), usec(c.ScriptUsec), c.PerCall())
			}
		}
	}
	w("\n")

	if len(r.RedisBenchmark) > 0 {
		w("### redis-benchmark, the server's own ceiling\n\n")
		w("| what | command | requests/s | p50 / p99 (ms) |\n|---|---|---:|---:|\n")
		for _, l := range r.RedisBenchmark {
			w("| %s | `redis-benchmark %s %s` | %s | %s / %s |\n", mdEscape(l.Name), strings.Join(l.Args, " "), shorten(l.Command, 80), rate(l.PerSecond), ms(l.P50), ms(l.P99))
		}
		w("\n")
	}

	if len(r.Algorithms) > 0 {
		w("### Floodgate's algorithms on Redis at %d callers\n\n", s.AlgoWorkers)
		w("| algorithm | decisions/s | p50 / p99 (ms) | server CPU µs/decision | script µs/decision | decisions/call |\n|---|---:|---:|---:|---:|---:|\n")
		for _, c := range r.Algorithms {
			w("| %s | %s | %s / %s | %.1f | %s | %.1f |\n", mdEscape(c.Name), rate(c.PerSecond), ms(c.P50), ms(c.P99), c.CPUPerOp, usec(c.ScriptUsecPerOp), c.PerCall())
		}
		w("\n")
	}

	if len(r.Memory) > 0 {
		w("### Redis memory per identity (MEMORY USAGE of the keys one identity creates)\n\n")
		w("| algorithm | state | keys | bytes |\n|---|---|---:|---:|\n")
		for _, l := range r.Memory {
			state := "after one request"
			if l.Entries > 1 {
				state = strconv.Itoa(l.Entries) + " requests in the window"
			}
			w("| %s | %s | %d | %d |\n", l.Algorithm, state, l.Keys, l.Bytes)
		}
		if slope, ok := logSlope(r.Memory); ok {
			w("\nSliding log grows by about %.0f bytes per request in its window: O(limit) per identity, against a constant for the other algorithms.\n", slope)
		}
		w("\n")
	}

	if len(r.InMemory) > 0 {
		w("### In-process limiters (%d keys, parallel callers, existing keys)\n\n", s.Keys)
		if s.Rounds > 1 {
			w("The limiters take turns, round after round; each line is its median round, with the range of its rounds.\n\n")
		}
		w("| limiter | ns/decision | rounds (ns) | B/decision | allocs/decision | callers |\n|---|---:|---:|---:|---:|---:|\n")
		for _, l := range r.InMemory {
			span := "–"
			if n := len(l.Rounds); n > 1 {
				span = fmt.Sprintf("%.0f–%.0f (%d)", l.Rounds[0], l.Rounds[n-1], n)
			}
			w("| %s | %.0f | %s | %d | %d | %d |\n", mdEscape(l.Name), l.NsPerOp, span, l.BytesPerOp, l.AllocsPerOp, l.Callers)
		}
		w("\n")
	}

	if len(r.HotKey) > 0 {
		w("### One hot key (%d callers, one identity, open limits)\n\n", s.FloodWorkers)
		w("| setup | decisions/s | p50 / p99 (ms) | errors | first error |\n|---|---:|---:|---:|---|\n")
		for _, c := range r.HotKey {
			w("| %s | %s | %s / %s | %d | %s |\n", mdEscape(c.Name), rate(c.PerSecond), ms(c.P50), ms(c.P99), c.Errors, mdEscape(shorten(c.FirstError, 80)))
		}
		w("\n")
	}

	if len(r.Flood) > 0 {
		w("### Flood on one identity that is already denied (%d callers)\n\n", s.FloodWorkers)
		w("| setup | decisions/s | p50 / p99 (ms) | admissions | errors |\n|---|---:|---:|---:|---:|\n")
		for _, c := range r.Flood {
			w("| %s | %s | %s / %s | %d | %d |\n", mdEscape(c.Name), rate(c.PerSecond), ms(c.P50), ms(c.P99), c.Allowed, c.Errors)
		}
		w("\n")
	}

	w("### Targets\n\n| target | measured | verdict |\n|---|---|---|\n")
	for _, t := range Targets(r) {
		got := t.Got
		if got == "" {
			got = "–"
		}
		w("| %s | %s | %s |\n", mdEscape(t.Name), mdEscape(got), t.Status)
	}
	if len(r.Notes) > 0 {
		w("\nNotes from the run:\n\n")
		for _, n := range r.Notes {
			w("- %s\n", mdEscape(n))
		}
	}
	return b.String()
}

// anomalies lists cells whose premise failed: denials under open limits,
// or errors.
func anomalies(r *Run) string {
	var lines []string
	for _, se := range r.Redis {
		for _, c := range se.Cells {
			if c.Denied > 0 || c.Errors > 0 {
				total := c.Allowed + c.Denied + c.Errors
				l := fmt.Sprintf("- %s at %d callers: %d denied and %d errors out of %d operations", se.Name, c.Workers, c.Denied, c.Errors, total)
				if c.FirstError != "" {
					l += fmt.Sprintf(" (first error: %s)", shorten(c.FirstError, 120))
				}
				lines = append(lines, mdEscape(l))
			}
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "Operations that did not end in an allowed decision (not counted as decisions):\n\n" + strings.Join(lines, "\n") + "\n"
}

// logSlope returns the bytes per entry of the sliding log lines, from the
// smallest and largest entry counts measured.
func logSlope(lines []MemoryLine) (float64, bool) {
	var lo, hi *MemoryLine
	for i := range lines {
		l := &lines[i]
		if l.Algorithm != "sliding_log" {
			continue
		}
		if lo == nil || l.Entries < lo.Entries {
			lo = l
		}
		if hi == nil || l.Entries > hi.Entries {
			hi = l
		}
	}
	if lo == nil || hi.Entries == lo.Entries {
		return 0, false
	}
	return float64(hi.Bytes-lo.Bytes) / float64(hi.Entries-lo.Entries), true
}

func header(b *strings.Builder, first string, workers []int, suffix string) {
	fmt.Fprintf(b, "| %s |", first)
	for _, w := range workers {
		fmt.Fprintf(b, " %d caller%s%s |", w, plural(w), suffix)
	}
	b.WriteString("\n|---|")
	for range workers {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// rate formats decisions per second, e.g. "185k" or "950".
func rate(v float64) string {
	switch {
	case v >= 10_000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// ms formats a latency in milliseconds with three significant digits.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// dur formats a latency for prose.
func dur(d time.Duration) string { return ms(d) + " ms" }

func usec(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// mdEscape keeps text from breaking a table row.
func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
