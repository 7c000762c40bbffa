package report

import (
	"fmt"
	"strings"
	"time"
)

// Status is a target's outcome.
type Status uint8

// The outcomes.
const (
	// NotMeasured: the run lacks the cells the target needs.
	NotMeasured Status = iota
	// Met: the measured value satisfies the target.
	Met
	// Missed: it does not.
	Missed
	// Reported: the target asks for a number, not a threshold.
	Reported
)

// String returns the status as printed in the targets table.
func (s Status) String() string {
	switch s {
	case Met:
		return "met"
	case Missed:
		return "**not met**"
	case Reported:
		return "reported"
	}
	return "not measured"
}

// Target is one performance target and what the run says about it.
type Target struct {
	// Name is the target as stated.
	Name string
	// Got describes the measured values behind the verdict.
	Got string
	// Status is the verdict.
	Status Status
}

// Targets checks the run against the performance targets. Ratios are taken
// within this run only.
func Targets(r *Run) []Target {
	var ts []Target
	top := r.MaxWorkers()

	for _, p := range []struct{ id, bench string }{{SlidingWindow, BenchSW}, {GCRA, BenchGCRA}, {SlidingWinAP, BenchSW}, {GCRAAP, BenchGCRA}} {
		ts = append(ts, ratioTarget(r, fmt.Sprintf("%s ≥ 3× redis_rate at %d callers", seriesName(r, p.id), top), p.id, RedisRate, top, 3))
		t := Target{Name: fmt.Sprintf("%s at %d callers ≥ 50%% of redis-benchmark -P 16 of the same script", seriesName(r, p.id), top)}
		s, ok1 := r.Series(p.id)
		b, ok2 := r.Bench(p.bench)
		if ok1 && ok2 && b.PerSecond > 0 {
			if c, ok := s.At(top); ok {
				ratio := c.PerSecond / b.PerSecond
				t.Got = fmt.Sprintf("%s vs %s = %.0f%%", rate(c.PerSecond), rate(b.PerSecond), 100*ratio)
				t.Status = verdict(ratio >= 0.5)
			}
		}
		ts = append(ts, t)
	}
	for _, id := range []string{SlidingWindow, GCRA} {
		t := ratioTarget(r, fmt.Sprintf("%s at 1 caller within 15%% of a bare EVALSHA round trip", seriesName(r, id)), id, Tiny, 1, 0.85)
		ts = append(ts, t)
	}
	for _, p := range []struct{ layers, single string }{{LayersAP, SlidingWinAP}, {Layers, SlidingWindow}} {
		t := Target{Name: fmt.Sprintf("%s ≥ 80%% of %s, at every concurrency", seriesName(r, p.layers), seriesName(r, p.single))}
		l, ok1 := r.Series(p.layers)
		s, ok2 := r.Series(p.single)
		if ok1 && ok2 {
			var parts []string
			worst, n := 0.0, 0
			for _, w := range r.Settings.Concurrency {
				lc, ok1 := l.At(w)
				sc, ok2 := s.At(w)
				if !ok1 || !ok2 || sc.PerSecond == 0 {
					continue
				}
				ratio := lc.PerSecond / sc.PerSecond
				parts = append(parts, fmt.Sprintf("%d: %.0f%%", w, 100*ratio))
				if n == 0 || ratio < worst {
					worst = ratio
				}
				n++
			}
			if n > 0 {
				t.Got = strings.Join(parts, ", ")
				t.Status = verdict(worst >= 0.8)
			}
		}
		ts = append(ts, t)
	}
	for _, id := range []string{SlidingWinAP, GCRAAP, LayersAP, SlidingWindow, GCRA} {
		t := Target{Name: fmt.Sprintf("p99 at 64 callers ≤ 1 ms: %s", seriesName(r, id))}
		if s, ok := r.Series(id); ok {
			if c, ok := s.At(64); ok {
				t.Got = "p99 " + dur(c.P99)
				t.Status = verdict(c.P99 <= time.Millisecond)
			}
		}
		ts = append(ts, t)
	}
	cpu := Target{Name: "Redis CPU per decision, per algorithm"}
	if len(r.Algorithms) > 0 {
		var parts []string
		for _, c := range r.Algorithms {
			parts = append(parts, fmt.Sprintf("%s %.1f µs", c.Name, c.CPUPerOp))
		}
		cpu.Got, cpu.Status = strings.Join(parts, "; "), Reported
	}
	ts = append(ts, cpu)
	mem := Target{Name: "Redis memory per identity, per algorithm"}
	if len(r.Memory) > 0 {
		var parts []string
		for _, m := range r.Memory {
			if m.Entries > 1 {
				parts = append(parts, fmt.Sprintf("%s (%d entries) %d B", m.Algorithm, m.Entries, m.Bytes))
			} else {
				parts = append(parts, fmt.Sprintf("%s %d B", m.Algorithm, m.Bytes))
			}
		}
		mem.Got, mem.Status = strings.Join(parts, "; "), Reported
	}
	ts = append(ts, mem)

	for _, id := range []string{MemSW, MemGCRA, MemLimiterSW} {
		t := Target{Name: fmt.Sprintf("%s ns/op ≤ sethvargo/go-limiter's", inMemName(r, id))}
		m, ok1 := r.InMem(id)
		s, ok2 := r.InMem(MemSethvargo)
		if ok1 && ok2 {
			t.Got = fmt.Sprintf("%.0f ns vs %.0f ns", m.NsPerOp, s.NsPerOp)
			t.Status = verdict(m.NsPerOp <= s.NsPerOp)
		}
		ts = append(ts, t)
	}
	for _, id := range []string{MemSW, MemGCRA, MemLimiterSW} {
		t := Target{Name: fmt.Sprintf("0 allocations per decision on an existing key: %s", inMemName(r, id))}
		if m, ok := r.InMem(id); ok {
			t.Got = fmt.Sprintf("%d allocs, %d B", m.AllocsPerOp, m.BytesPerOp)
			t.Status = verdict(m.AllocsPerOp == 0)
		}
		ts = append(ts, t)
	}
	flood := Target{Name: "flood on a denied identity: deny cache ≥ 10× going to Redis, zero extra admissions"}
	redisFlood, ok1 := r.FloodCell(FloodRedis)
	cached, ok2 := r.FloodCell(FloodDenyCache)
	if ok1 && ok2 && redisFlood.PerSecond > 0 {
		ratio := cached.PerSecond / redisFlood.PerSecond
		flood.Got = fmt.Sprintf("%s vs %s = %.1f×; admissions %d and %d", rate(cached.PerSecond), rate(redisFlood.PerSecond), ratio, cached.Allowed, redisFlood.Allowed)
		flood.Status = verdict(ratio >= 10 && cached.Allowed == 0 && redisFlood.Allowed == 0 && cached.Errors == 0)
	} else if ok1 {
		flood.Got = fmt.Sprintf("Redis only: %s, %d admissions (no deny cache measured)", rate(redisFlood.PerSecond), redisFlood.Allowed)
	}
	ts = append(ts, flood)
	return ts
}

// ratioTarget checks series id ≥ factor × series base at workers callers.
func ratioTarget(r *Run, name, id, base string, workers int, factor float64) Target {
	t := Target{Name: name}
	s, ok1 := r.Series(id)
	b, ok2 := r.Series(base)
	if !ok1 || !ok2 {
		return t
	}
	sc, ok1 := s.At(workers)
	bc, ok2 := b.At(workers)
	if !ok1 || !ok2 || bc.PerSecond == 0 {
		return t
	}
	ratio := sc.PerSecond / bc.PerSecond
	t.Got = fmt.Sprintf("%s vs %s = %.2f×", rate(sc.PerSecond), rate(bc.PerSecond), ratio)
	t.Status = verdict(ratio >= factor)
	return t
}

func verdict(ok bool) Status {
	if ok {
		return Met
	}
	return Missed
}

func seriesName(r *Run, id string) string {
	if s, ok := r.Series(id); ok {
		return s.Name
	}
	return id
}

func inMemName(r *Run, id string) string {
	if m, ok := r.InMem(id); ok {
		return m.Name
	}
	return id
}
