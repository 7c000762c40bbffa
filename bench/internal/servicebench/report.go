package servicebench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/bench/internal/report"
)

// group is the rounds of one service, transport and caller count.
type group struct {
	service   Service
	transport Transport
	callers   int
	cells     []Cell // one per round, in round order
}

// groups returns the cells grouped, by transport, caller count and
// service, in the configuration's order.
func groups(res *Result) []*group {
	var out []*group
	find := func(c Cell) *group {
		for _, g := range out {
			if g.service == c.Service && g.transport == c.Transport && g.callers == c.Callers {
				return g
			}
		}
		g := &group{service: c.Service, transport: c.Transport, callers: c.Callers}
		out = append(out, g)
		return g
	}
	for _, c := range res.Cells {
		g := find(c)
		g.cells = append(g.cells, c)
	}
	order := func(s Service) int { return slices.Index(Services, s) }
	slices.SortStableFunc(out, func(a, b *group) int {
		switch {
		case a.transport != b.transport:
			return int(a.transport) - int(b.transport)
		case a.callers != b.callers:
			return a.callers - b.callers
		}
		return order(a.service) - order(b.service)
	})
	return out
}

// stat is a value's median and range over rounds.
type stat struct{ med, lo, hi float64 }

func statOf(vs []float64) stat {
	if len(vs) == 0 {
		return stat{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{med: m, lo: s[0], hi: s[len(s)-1]}
}

// of collects f over the group's rounds.
func (g *group) of(f func(Cell) float64) stat {
	vs := make([]float64, len(g.cells))
	for i, c := range g.cells {
		vs[i] = f(c)
	}
	return statOf(vs)
}

// ratio collects f(ours)/f(theirs) over the rounds both have, the round
// the same.
func ratio(ours, theirs *group, f func(Cell) float64) (stat, bool) {
	var vs []float64
	for _, a := range ours.cells {
		for _, b := range theirs.cells {
			if a.Round == b.Round && f(b) > 0 {
				vs = append(vs, f(a)/f(b))
			}
		}
	}
	return statOf(vs), len(vs) > 0
}

// format writes a stat with format: the median, and the range when the
// rounds differ.
func (s stat) format(f func(float64) string) string {
	if f(s.lo) == f(s.hi) {
		return f(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.lo), f(s.hi))
}

// thousands formats a rate as 12.3k.
func thousands(v float64) string {
	if v >= 100_000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.1fk", v/1000)
}

func oneDecimal(v float64) string  { return fmt.Sprintf("%.1f", v) }
func twoDecimals(v float64) string { return fmt.Sprintf("%.2f", v) }
func times(v float64) string       { return fmt.Sprintf("%.2f×", v) }

// ms formats milliseconds with 3 significant digits.
func ms(v float64) string {
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

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cores is a CPU time as a share of the window's wall time.
func cores(d, wall time.Duration) float64 { return d.Seconds() / max(wall.Seconds(), 1e-9) }

// Markdown formats the run: what was run on what, then one table per
// transport.
func Markdown(res *Result) string {
	var b strings.Builder
	cfg := res.Config
	fmt.Fprintf(&b, "Run of %s, %s in all.\n\n", res.Start.UTC().Format("2006-01-02 15:04 UTC"), res.Elapsed.Round(time.Second))
	fmt.Fprintf(&b, "| machine | |\n|---|---|\n")
	fmt.Fprintf(&b, "| CPU | %s, %d logical CPUs |\n", cpuModel(), runtime.NumCPU())
	fmt.Fprintf(&b, "| Go | %s, %s/%s |\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "| Redis | %s, a fresh redis-server per cell on loopback, no persistence |\n", res.RedisVersion)
	fmt.Fprintf(&b, "| load average before / after the run | %s / %s (the second counts the run itself) |\n", res.LoadBefore, res.LoadAfter)
	other := make([]float64, len(res.Cells))
	for i, c := range res.Cells {
		other[i] = cores(c.CPU.Other, c.Elapsed)
	}
	if len(other) > 0 {
		fmt.Fprintf(&b, "| other work during the measured windows (the machine's busy time less the service, Redis and the load generator) | %s cores, median of the cells (range) |\n", statOf(other).format(twoDecimals))
	}
	b.WriteString("\n")
	if res.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`. ", res.Command)
	}
	fmt.Fprintf(&b, "Closed loop, %v measured per cell after %v of warm-up, %d identities round robin, every decision allowed (limit %d per minute). ",
		cfg.Duration, cfg.Warmup, cfg.Identities, Limit)
	fmt.Fprintf(&b, "%d round(s), the services interleaved in each; a cell with several rounds shows the median and (range), each figure its own (so parts need not add up to the total's median). ", cfg.Rounds)
	b.WriteString("Ratios compare each Floodgate service with envoyproxy/ratelimit in the same round, transport and caller count (decisions/s: higher is better; p99 and CPU: lower is better). ")
	b.WriteString("CPU is user+system time over the measured window: the service and its redis-server from /proc/<pid>/stat, the load generator from getrusage; \"other\" is the rest of the machine's busy time (/proc/stat) — other processes and interrupts. ")
	fmt.Fprintf(&b, "Every decision must be taken by Redis: floodgate serve runs with `--fallback-budget %v` (instead of its default 50 ms; %v is its default --decision-timeout) so that, like envoyproxy/ratelimit (which waits up to its REDIS_TIMEOUT, 10 s), it waits for a slow Redis instead of answering from its local fallback store; ", ServeFallbackBudget, ServeFallbackBudget)
	b.WriteString("\"not by Redis\" is what the Floodgate services' own metrics count over the warm-up and the window (serve: `rate_limit_fallback_total` and `floodgate_degraded_responses_total`; envoy-compat: hits `over_limit_with_local_cache`; envoyproxy/ratelimit has no fallback and its local cache is off), and a cell with any is measured again, then kept and flagged ⚠ when every try had some. ")
	fmt.Fprintf(&b, "Redis commands per decision are split from INFO commandstats into keyed commands (data commands, those run by scripts included) and script calls (EVALSHA/EVAL); each decision needs %d keyed commands (a read and a write of its counter: GET+SET in serve's script, INCRBY+EXPIRE in the others), and a cell below 95%% of that is flagged ⚠.\n", KeyedNeeded)
	for _, t := range cfg.Transports {
		writeTable(&b, res, t)
	}
	return b.String()
}

func writeTable(b *strings.Builder, res *Result, t Transport) {
	if t == GRPC {
		b.WriteString("\n#### gRPC `ShouldRateLimit`, one descriptor {user: id}\n\n")
		fmt.Fprintf(b, "The load generator calls with its %v gRPC client (`floodgate loadtest --grpc-client %v`).\n\n", LoadgenGRPCClient, LoadgenGRPCClient)
	} else {
		b.WriteString("\n#### HTTP: `POST /json` (Envoy's request as JSON; floodgate serve: `POST /v1/check`)\n\n")
	}
	b.WriteString("| callers | service | decisions/s | p50 / p99 ms | errors / denied | CPU µs per decision: service + Redis = total | decisions not by Redis | Redis commands per decision: keyed + script calls (all) | cores used: service / Redis / load generator / other | load generator µs per decision | vs envoyproxy/ratelimit: decisions/s · p99 · CPU per decision |\n")
	b.WriteString("|---:|---|---:|---:|---:|---|---:|---:|---|---:|---|\n")
	var warnings []string
	gs := groups(res)
	for _, g := range gs {
		if g.transport != t {
			continue
		}
		var theirs *group
		for _, h := range gs {
			if h.service == Theirs && h.transport == t && h.callers == g.callers {
				theirs = h
			}
		}
		rate := func(c Cell) float64 { return c.Rate() }
		p99 := func(c Cell) float64 { return msOf(c.P99) }
		cpu := func(c Cell) float64 { return micros(c.CPUPerDecision()) }
		var errs, denied int64
		notByRedis, short := "0", ""
		switch g.service {
		case Theirs:
			notByRedis = "— (no fallback)"
		case Floor, FloorFast:
			notByRedis = "— (no Redis)"
		}
		var fallbacks int64
		var invalidRounds, shortRounds []string
		for _, c := range g.cells {
			errs += c.Errors
			denied += c.Denied
			fallbacks += c.NotByRedis
			if c.Invalid() {
				invalidRounds = append(invalidRounds, fmt.Sprintf("round %d: %d of %d", c.Round, c.NotByRedis, c.Decisions))
			}
			if keyedShort(c) {
				shortRounds = append(shortRounds, fmt.Sprintf("round %d: %.2f", c.Round, perDecisionCount(c.KeyedCommands, c.Decisions)))
			}
		}
		name := g.service.String()
		if t == HTTP {
			name += " (" + g.service.endpoint(t) + ")"
		}
		if len(invalidRounds) > 0 {
			notByRedis = fmt.Sprintf("⚠ %d", fallbacks)
			warnings = append(warnings, fmt.Sprintf("⚠ **Invalid:** %s, %d callers: decisions taken without Redis (%s); its figures are not comparable.", name, g.callers, strings.Join(invalidRounds, ", ")))
		}
		if len(shortRounds) > 0 {
			short = "⚠ "
			warnings = append(warnings, fmt.Sprintf("⚠ %s, %d callers: fewer keyed Redis commands per decision than the %d each decision needs (%s): some decisions did not reach Redis, or were merged.", name, g.callers, KeyedNeeded, strings.Join(shortRounds, ", ")))
		}
		vs := "—"
		if theirs != nil && g.service != Theirs {
			r1, ok1 := ratio(g, theirs, rate)
			r2, ok2 := ratio(g, theirs, p99)
			r3, ok3 := ratio(g, theirs, cpu)
			if ok1 && ok2 && ok3 {
				vs = r1.format(times) + " · " + r2.format(times) + " · " + r3.format(times)
			}
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s / %s | %d / %d | %s + %s = %s | %s | %s%s + %s (%s) | %s / %s / %s / %s | %s | %s |\n",
			g.callers, name,
			g.of(rate).format(thousands),
			g.of(func(c Cell) float64 { return msOf(c.P50) }).format(ms), g.of(p99).format(ms),
			errs, denied,
			g.of(func(c Cell) float64 { return micros(perDecision(c.CPU.Service, c.Decisions)) }).format(oneDecimal),
			g.of(func(c Cell) float64 { return micros(perDecision(c.CPU.Redis, c.Decisions)) }).format(oneDecimal),
			g.of(cpu).format(oneDecimal),
			notByRedis, short,
			g.of(func(c Cell) float64 { return perDecisionCount(c.KeyedCommands, c.Decisions) }).format(twoDecimals),
			g.of(func(c Cell) float64 { return perDecisionCount(c.ScriptCalls, c.Decisions) }).format(twoDecimals),
			g.of(func(c Cell) float64 { return perDecisionCount(c.RedisCommands, c.Decisions) }).format(twoDecimals),
			g.of(func(c Cell) float64 { return cores(c.CPU.Service, c.Elapsed) }).format(twoDecimals),
			g.of(func(c Cell) float64 { return cores(c.CPU.Redis, c.Elapsed) }).format(twoDecimals),
			g.of(func(c Cell) float64 { return cores(c.CPU.Loadgen, c.Elapsed) }).format(twoDecimals),
			g.of(func(c Cell) float64 { return cores(c.CPU.Other, c.Elapsed) }).format(twoDecimals),
			g.of(func(c Cell) float64 { return micros(perDecision(c.CPU.Loadgen, c.Decisions)) }).format(oneDecimal),
			vs)
	}
	if len(warnings) > 0 {
		b.WriteString("\n" + strings.Join(warnings, "\n\n") + "\n")
	}
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// The markers around the generated part of a Markdown file: Splice
// replaces what lies between them and keeps the rest.
const (
	BeginMarker = "<!-- servicebench:begin (generated by `cd bench && go run ./cmd/servicebench -out ../docs/benchmarks.md`; edits between these markers are overwritten) -->"
	EndMarker   = "<!-- servicebench:end -->"
)

// Splice returns doc with the text between the markers replaced by
// generated; a doc without markers gets them, with generated, appended
// (report.SpliceBetween).
func Splice(doc, generated string) (string, error) {
	return report.SpliceBetween(doc, BeginMarker, EndMarker, generated)
}
