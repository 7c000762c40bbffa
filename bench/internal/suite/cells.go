package suite

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/bench/internal/closedloop"
	"github.com/floodgate-rl/floodgate/bench/internal/contender"
	"github.com/floodgate-rl/floodgate/bench/internal/redisinfo"
	"github.com/floodgate-rl/floodgate/bench/internal/report"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// clientKind is the Redis client a contender runs on.
type clientKind uint8

const (
	// plain is a *redis.Client with its connection pool.
	plain clientKind = iota
	// autoPipe is that client's blocking AutoPipeliner (go-redis v9.23).
	autoPipe
	// rueidisAuto is a rueidis client (auto-pipelining by default).
	rueidisAuto
)

// clients holds one cell's freshly made clients.
type clients struct {
	plain *redis.Client
	ap    *redis.AutoPipeliner
	rue   rueidis.Client
	// prefix is unique to the cell.
	prefix string
}

func (c *clients) close() {
	if c.ap != nil {
		_ = c.ap.Close()
	}
	if c.plain != nil {
		_ = c.plain.Close()
	}
	if c.rue != nil {
		c.rue.Close()
	}
}

// floodgateClient returns the client a Floodgate store of kind k uses.
func (c *clients) floodgateClient(k clientKind) (redisstore.Client, error) {
	switch k {
	case autoPipe:
		return c.ap, nil
	case rueidisAuto:
		return contender.NewRueidisStoreClient(c.rue)
	}
	return c.plain, nil
}

// spec is one contender of the main matrix.
type spec struct {
	id, name string
	kind     clientKind
	build    func(ctx context.Context, c *clients) (closedloop.Op, error)
}

// newLimiter returns a Floodgate limiter on a Redis store over client.
func newLimiter(client redisstore.Client, prefix string, opts redisstore.Options) (*floodgate.Limiter, error) {
	st, err := redisstore.New(client, opts)
	if err != nil {
		return nil, err
	}
	return floodgate.New(st, floodgate.Options{Prefix: prefix})
}

func floodgateSpec(id, name string, kind clientKind, a floodgate.Algorithm) spec {
	return floodgateSpecWith(id, name, kind, a, storeOptions(kind))
}

// storeOptions returns the store options for a client kind: coalescing on
// for every kind (the store turns it on by itself only for a plain
// *redis.Client; the harness's AutoPipeliner and rueidis adapter also talk
// to the one server).
func storeOptions(kind clientKind) redisstore.Options {
	if kind == plain {
		return redisstore.Options{}
	}
	return redisstore.Options{Coalesce: redisstore.CoalesceOn}
}

func floodgateSpecWith(id, name string, kind clientKind, a floodgate.Algorithm, opts redisstore.Options) spec {
	return spec{id: id, name: name, kind: kind, build: func(_ context.Context, c *clients) (closedloop.Op, error) {
		client, err := c.floodgateClient(kind)
		if err != nil {
			return nil, err
		}
		l, err := newLimiter(client, c.prefix, opts)
		if err != nil {
			return nil, err
		}
		p, err := contender.OpenPolicy("bench", a)
		if err != nil {
			return nil, err
		}
		return contender.Floodgate(l, p)
	}}
}

func layeredSpec(id, name string, kind clientKind) spec {
	return spec{id: id, name: name, kind: kind, build: func(_ context.Context, c *clients) (closedloop.Op, error) {
		client, err := c.floodgateClient(kind)
		if err != nil {
			return nil, err
		}
		l, err := newLimiter(client, c.prefix, storeOptions(kind))
		if err != nil {
			return nil, err
		}
		return contender.Layered(l, floodgate.SlidingWindow)
	}}
}

// matrixSpecs lists the main matrix's contenders, in table order.
func matrixSpecs() []spec {
	return []spec{
		{id: report.RedisRate, name: "go-redis/redis_rate v10 (GCRA)", kind: plain, build: func(_ context.Context, c *clients) (closedloop.Op, error) {
			return contender.RedisRate(c.plain)
		}},
		{id: report.Ulule, name: "ulule/limiter v3 (fixed window)", kind: plain, build: func(_ context.Context, c *clients) (closedloop.Op, error) {
			return contender.Ulule(c.plain, c.prefix)
		}},
		{id: report.Throttled, name: "throttled v2 (GCRA + CAS)", kind: plain, build: func(_ context.Context, c *clients) (closedloop.Op, error) {
			return contender.Throttled(c.plain, c.prefix+":")
		}},
		{id: report.RedisRateAP, name: "redis_rate v10 on go-redis AutoPipeline", kind: autoPipe, build: func(_ context.Context, c *clients) (closedloop.Op, error) {
			return contender.RedisRate(c.ap)
		}},
		{id: report.Tiny, name: "bare EVALSHA (INCR+EXPIRE), go-redis", kind: plain, build: func(ctx context.Context, c *clients) (closedloop.Op, error) {
			op, _, err := contender.Tiny(ctx, c.plain)
			return op, err
		}},
		{id: report.TinyAP, name: "bare EVALSHA, go-redis AutoPipeline", kind: autoPipe, build: func(ctx context.Context, c *clients) (closedloop.Op, error) {
			op, _, err := contender.Tiny(ctx, c.ap)
			return op, err
		}},
		{id: report.TinyRueidis, name: "bare EVALSHA, rueidis", kind: rueidisAuto, build: func(_ context.Context, c *clients) (closedloop.Op, error) {
			return contender.RueidisTiny(c.rue)
		}},
		floodgateSpec(report.SlidingWindow, "floodgate sliding_window, go-redis", plain, floodgate.SlidingWindow),
		floodgateSpec(report.GCRA, "floodgate gcra, go-redis", plain, floodgate.GCRA),
		layeredSpec(report.Layers, "floodgate 3 layers, go-redis", plain),
		floodgateSpec(report.SlidingWinAP, "floodgate sliding_window, AutoPipeline", autoPipe, floodgate.SlidingWindow),
		floodgateSpec(report.GCRAAP, "floodgate gcra, AutoPipeline", autoPipe, floodgate.GCRA),
		layeredSpec(report.LayersAP, "floodgate 3 layers, AutoPipeline", autoPipe),
		floodgateSpec(report.SlidingWinRueidis, "floodgate sliding_window, rueidis (adapter)", rueidisAuto, floodgate.SlidingWindow),
		floodgateSpecWith(report.SlidingWinAPSingle, "floodgate sliding_window, AutoPipeline, coalescing off", autoPipe, floodgate.SlidingWindow, redisstore.Options{Coalesce: redisstore.CoalesceOff}),
	}
}

// newClients makes the clients of one cell.
func (r *run) newClients(kind clientKind) (*clients, error) {
	r.cellNo++
	c := &clients{prefix: fmt.Sprintf("c%d", r.cellNo)}
	switch kind {
	case plain, autoPipe:
		c.plain = r.srv.Client(r.cfg.PoolSize)
		if kind == autoPipe {
			ap, err := c.plain.AutoPipeline()
			if err != nil {
				c.close()
				return nil, fmt.Errorf("suite: AutoPipeline: %w", err)
			}
			c.ap = ap
		}
	case rueidisAuto:
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.srv.Addr}, DisableCache: true, DisableRetry: true})
		if err != nil {
			return nil, fmt.Errorf("suite: rueidis: %w", err)
		}
		c.rue = rc
	}
	return c, nil
}

// keys returns the cell's identities: unique to the cell, readable (so
// Floodgate keeps them verbatim rather than hashing them).
func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s.u%d", prefix, i)
	}
	return ks
}

// measure runs op with workers callers over ks and adds the server's
// costs, read from INFO at the edges of the measured period.
func (r *run) measure(ctx context.Context, op closedloop.Op, workers int, ks []string) (report.Cell, error) {
	var before, after redisinfo.Snapshot
	var cpuBefore, cpuAfter time.Duration // this process's
	var infoErr error
	snap := func(s *redisinfo.Snapshot, cpu *time.Duration) func() {
		return func() {
			*cpu = selfCPU()
			var err error
			if *s, err = redisinfo.Take(ctx, r.admin); err != nil && infoErr == nil {
				infoErr = err
			}
		}
	}
	st, err := closedloop.Run(ctx, closedloop.Config{
		Workers:      workers,
		Duration:     r.cfg.Duration,
		Warmup:       r.cfg.Warmup,
		Keys:         ks,
		Seed:         uint64(r.cellNo),
		MeasureStart: snap(&before, &cpuBefore),
		MeasureEnd:   snap(&after, &cpuAfter),
	}, op)
	if err != nil {
		return report.Cell{}, err
	}
	if infoErr != nil {
		return report.Cell{}, infoErr
	}
	cost := redisinfo.Diff(before, after, "evalsha", "eval")
	c := report.Cell{
		Workers:         workers,
		PerSecond:       st.PerSecond(),
		P50:             st.Latency.Quantile(0.50),
		P99:             st.Latency.Quantile(0.99),
		Max:             st.Latency.Max(),
		Allowed:         st.Allowed,
		Denied:          st.Denied,
		Errors:          st.Errors,
		CPUPerOp:        cost.CPUPerOp(st.Decisions() + st.Errors),
		ClientCPUPerOp:  perOp(cpuAfter-cpuBefore, st.Decisions()+st.Errors),
		ScriptUsec:      cost.UsecPerCall(),
		ScriptUsecPerOp: cost.UsecPerOp(st.Decisions() + st.Errors),
		ScriptCalls:     cost.Calls,
	}
	if st.FirstError != nil {
		c.FirstError = st.FirstError.Error()
	}
	return c, nil
}

// matrix runs the main table. Cells are run concurrency by concurrency,
// every contender in turn, so that the cells a ratio compares are measured
// close together in time; with several rounds each cell keeps its median
// round (by decisions per second).
func (r *run) matrix(ctx context.Context) error {
	var specs []spec
	for _, sp := range matrixSpecs() {
		if len(r.cfg.Only) == 0 || slices.Contains(r.cfg.Only, sp.id) {
			specs = append(specs, sp)
		}
	}
	rounds := make([][][]report.Cell, len(specs)) // [spec][concurrency][round]
	for i := range rounds {
		rounds[i] = make([][]report.Cell, len(r.cfg.Concurrency))
	}
	for round := range r.cfg.Rounds {
		for wi, w := range r.cfg.Concurrency {
			for si, sp := range specs {
				c, err := r.runSpec(ctx, sp, w)
				if err != nil {
					if ctx.Err() != nil {
						return err
					}
					r.note("%s at %d callers, round %d, not measured: %v", sp.name, w, round+1, err)
					continue
				}
				rounds[si][wi] = append(rounds[si][wi], c)
			}
		}
	}
	for si, sp := range specs {
		se := report.Series{ID: sp.id, Name: sp.name}
		for wi := range r.cfg.Concurrency {
			if c, ok := median(rounds[si][wi]); ok {
				se.Cells = append(se.Cells, c)
			}
		}
		r.out.Redis = append(r.out.Redis, se)
	}
	return nil
}

// median returns the cell with the median decisions per second (the lower
// middle one for an even count).
func median(cells []report.Cell) (report.Cell, bool) {
	if len(cells) == 0 {
		return report.Cell{}, false
	}
	sorted := slices.Clone(cells)
	slices.SortFunc(sorted, func(a, b report.Cell) int { return cmp.Compare(a.PerSecond, b.PerSecond) })
	return sorted[(len(sorted)-1)/2], true
}

// runSpec measures one contender at one concurrency on fresh clients.
func (r *run) runSpec(ctx context.Context, sp spec, workers int) (report.Cell, error) {
	return r.runSpecKeys(ctx, sp, workers, r.cfg.Keys)
}

// runSpecKeys is runSpec over nKeys identities.
func (r *run) runSpecKeys(ctx context.Context, sp spec, workers, nKeys int) (report.Cell, error) {
	cl, err := r.newClients(sp.kind)
	if err != nil {
		return report.Cell{}, err
	}
	defer cl.close()
	op, err := sp.build(ctx, cl)
	if err != nil {
		return report.Cell{}, err
	}
	// One call before measuring, so a setup error is reported as such.
	if _, err := op(ctx, cl.prefix+".probe"); err != nil {
		return report.Cell{}, fmt.Errorf("first call: %w", err)
	}
	c, err := r.measure(ctx, op, workers, keys(cl.prefix, nKeys))
	if err != nil {
		return report.Cell{}, err
	}
	c.ID, c.Name = sp.id, sp.name
	r.progress(c)
	return c, nil
}

func (r *run) progress(c report.Cell) {
	line := fmt.Sprintf("%-45s %4d callers %9.0f/s  p50 %8v  p99 %8v  cpu %.1fµs  client cpu %.1fµs", c.Name, c.Workers, c.PerSecond, c.P50, c.P99, c.CPUPerOp, c.ClientCPUPerOp)
	if c.Denied > 0 || c.Errors > 0 {
		line += fmt.Sprintf("  denied %d errors %d", c.Denied, c.Errors)
	}
	if c.FirstError != "" {
		line += "  first error: " + c.FirstError
	}
	fmt.Fprintln(r.cfg.Progress, line)
}
