package suite

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/bench/internal/contender"
	"github.com/floodgate-rl/floodgate/bench/internal/membench"
	"github.com/floodgate-rl/floodgate/bench/internal/redisinfo"
	"github.com/floodgate-rl/floodgate/bench/internal/report"
	"github.com/floodgate-rl/floodgate/denycache"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// algorithmsInOrder are Floodgate's algorithms as the tables list them.
var algorithmsInOrder = []floodgate.Algorithm{
	floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.SlidingLog, floodgate.Quota,
}

// algorithms measures every algorithm on the AutoPipeline client.
func (r *run) algorithms(ctx context.Context) error {
	for _, a := range algorithmsInOrder {
		sp := floodgateSpec("alg-"+a.String(), a.String(), autoPipe, a)
		c, err := r.runSpec(ctx, sp, r.cfg.AlgoWorkers)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			r.note("algorithm %s not measured: %v", a, err)
			continue
		}
		r.out.Algorithms = append(r.out.Algorithms, c)
	}
	return nil
}

// hotKeyIDs are the contenders measured on one hot key.
var hotKeyIDs = []string{report.RedisRate, report.Throttled, report.SlidingWinAP, report.GCRAAP}

// hotKey measures some contenders with every caller on one identity (still
// under open limits): contention on one key, where a compare-and-swap
// design retries and fails.
func (r *run) hotKey(ctx context.Context) error {
	for _, sp := range matrixSpecs() {
		if !slices.Contains(hotKeyIDs, sp.id) {
			continue
		}
		c, err := r.runSpecKeys(ctx, sp, r.cfg.FloodWorkers, 1)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			r.note("%s on one hot key not measured: %v", sp.name, err)
			continue
		}
		r.out.HotKey = append(r.out.HotKey, c)
	}
	return nil
}

// logEntries are the sliding log sizes whose memory is measured.
var logEntries = []int{1, 10, 100, 1000}

// memoryPolicy is the policy whose state is measured: a realistic limit
// (an open one would let bucket state expire within a millisecond).
func memoryPolicy(a floodgate.Algorithm) (floodgate.Policy, error) {
	if a == floodgate.Quota {
		return floodgate.NewQuota("mem", 10_000, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	}
	p := floodgate.Policy{Name: "mem", Algorithm: a, Limit: 10_000, Window: time.Hour}
	return p, p.Validate()
}

// memory measures MEMORY USAGE of one identity's key per algorithm.
func (r *run) memory(ctx context.Context) error {
	c := r.srv.Client(1)
	defer c.Close()
	l, err := newLimiter(c, "mem", redisstore.Options{})
	if err != nil {
		return err
	}
	for _, a := range algorithmsInOrder {
		p, err := memoryPolicy(a)
		if err != nil {
			return err
		}
		counts := []int{1}
		if a == floodgate.SlidingLog {
			counts = logEntries
		}
		for _, n := range counts {
			id := fmt.Sprintf("identity.%s.%d", a, n)
			for i := range n {
				res, err := l.Allow(ctx, p, id)
				if err != nil {
					return fmt.Errorf("suite: memory of %s: %w", a, err)
				}
				if !res.Allowed {
					return fmt.Errorf("suite: memory of %s: request %d denied under an open limit", a, i)
				}
			}
			bytes, err := redisinfo.MemoryUsage(ctx, c, l.Key(p, id))
			if err != nil {
				return err
			}
			r.out.Memory = append(r.out.Memory, report.MemoryLine{Algorithm: a.String(), Entries: n, Keys: 1, Bytes: bytes})
		}
	}
	return nil
}

// floodLimit is the limit of the flooded identity's policy.
const floodLimit = 100

// flood exhausts one identity's limit, then floods it with FloodWorkers
// callers, first straight to Redis, then through the local deny cache
// (package denycache) in front of the same Redis store. Every decision
// must be a denial.
func (r *run) flood(ctx context.Context) error {
	p, err := floodgate.NewSlidingWindow("flood", floodLimit, time.Hour)
	if err != nil {
		return err
	}
	cl, err := r.newClients(autoPipe)
	if err != nil {
		return err
	}
	defer cl.close()
	rs, err := redisstore.New(cl.ap, storeOptions(autoPipe))
	if err != nil {
		return err
	}
	direct, err := floodgate.New(rs, floodgate.Options{Prefix: cl.prefix})
	if err != nil {
		return err
	}
	const victim = "victim"
	for i := 0; i <= floodLimit; i++ {
		res, err := direct.Allow(ctx, p, victim)
		if err != nil {
			return fmt.Errorf("suite: flood set-up: %w", err)
		}
		if want := i < floodLimit; res.Allowed != want {
			return fmt.Errorf("suite: flood set-up: request %d allowed=%v, want %v", i+1, res.Allowed, want)
		}
	}
	dc, err := denycache.New(rs, denycache.Options{})
	if err != nil {
		return err
	}
	cached, err := floodgate.New(dc, floodgate.Options{Prefix: cl.prefix})
	if err != nil {
		return err
	}
	for _, f := range []struct {
		id, name string
		l        *floodgate.Limiter
	}{
		{report.FloodRedis, "Redis store (AutoPipeline), every decision to Redis", direct},
		{report.FloodDenyCache, "denycache in front of the same Redis store", cached},
	} {
		op, err := contender.Floodgate(f.l, p)
		if err != nil {
			return err
		}
		c, err := r.measure(ctx, op, r.cfg.FloodWorkers, []string{victim})
		if err != nil {
			return err
		}
		c.ID, c.Name = f.id, f.name
		r.progress(c)
		r.out.Flood = append(r.out.Flood, c)
	}
	// Nothing was admitted, by either path, even outside the measured time.
	res, err := direct.Peek(ctx, p, victim)
	if err != nil {
		return err
	}
	if res.Remaining != 0 {
		return fmt.Errorf("suite: flood: %d remaining after the flood, want 0", res.Remaining)
	}
	r.note("the deny cache answered %d flood decisions locally", dc.Saved())
	return nil
}

// inMemory benchmarks the in-process limiters.
func (r *run) inMemory(ctx context.Context) error {
	ks := keys("mem", r.cfg.Keys)
	subjects := []struct {
		id string
		s  membench.Subject
	}{
		{report.MemSW, membench.MemstoreDirect(floodgate.SlidingWindow)},
		{report.MemGCRA, membench.MemstoreDirect(floodgate.GCRA)},
		{report.MemLimiterSW, membench.MemstoreLimiter(floodgate.SlidingWindow)},
		{report.MemSethvargo, membench.Sethvargo()},
		{"mem-xrate", membench.XRateSingle()},
		{"mem-xrate-map", membench.XRateMap()},
		{"mem-ulule", membench.UluleMemory()},
	}
	// The subjects take turns, round after round, and each keeps its
	// median round: this VM's speed can move within a minute, and one
	// subject measured alone in a slow spell would carry it.
	rounds := max(r.cfg.Rounds, 1)
	results := make([][]membench.Result, len(subjects))
	failed := make([]bool, len(subjects))
	for round := range rounds {
		for i, s := range subjects {
			if err := ctx.Err(); err != nil {
				return err
			}
			if failed[i] {
				continue
			}
			res, err := membench.Run(s.s, ks, r.cfg.MemParallelism)
			if err != nil {
				// A subject that fails once is dropped: its other rounds
				// would not be comparable.
				r.note("in-memory %s dropped (round %d of %d failed): %v", s.s.Name, round+1, rounds, err)
				failed[i] = true
				continue
			}
			results[i] = append(results[i], res)
			fmt.Fprintf(r.cfg.Progress, "%-55s %7.1f ns/op %4d B/op %3d allocs/op (%d callers, round %d)\n", res.Name, res.NsPerOp, res.BytesPerOp, res.AllocsPerOp, res.Callers, round+1)
		}
	}
	for i, s := range subjects {
		rs := results[i]
		if failed[i] || len(rs) == 0 {
			continue
		}
		slices.SortFunc(rs, func(a, b membench.Result) int { return cmp.Compare(a.NsPerOp, b.NsPerOp) })
		med := rs[len(rs)/2]
		line := report.InMemLine{
			ID: s.id, Name: med.Name, NsPerOp: med.NsPerOp, BytesPerOp: med.BytesPerOp, AllocsPerOp: med.AllocsPerOp, Callers: med.Callers,
		}
		for _, x := range rs {
			line.Rounds = append(line.Rounds, x.NsPerOp)
		}
		r.out.InMemory = append(r.out.InMemory, line)
	}
	return nil
}
