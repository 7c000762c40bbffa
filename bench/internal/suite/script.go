package suite

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/bench/internal/contender"
	"github.com/floodgate-rl/floodgate/bench/internal/redisbench"
	"github.com/floodgate-rl/floodgate/bench/internal/redisinfo"
	"github.com/floodgate-rl/floodgate/bench/internal/report"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// scriptHook records what a Floodgate store sends through one client: the
// script's source (from the EVAL it sends after NOSCRIPT) and the arguments
// of its last script call, as strings.
type scriptHook struct {
	mu   sync.Mutex
	src  string
	last []string
	err  error
}

// DialHook leaves dialing alone.
func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records EVAL and EVALSHA calls.
func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		if name == "eval" || name == "evalsha" {
			args := cmd.Args()
			strs := make([]string, len(args))
			var ferr error
			for i, a := range args {
				if strs[i], ferr = contender.FormatArg(a); ferr != nil {
					break
				}
			}
			h.mu.Lock()
			if ferr != nil && h.err == nil {
				h.err = ferr
			}
			h.last = strs
			if name == "eval" && len(strs) > 1 {
				h.src = strs[1]
			}
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook leaves pipelines alone (the store sends none).
func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// benchIdentity is the identity of the probe decisions: redis-benchmark
// replaces __rand_int__ in a command with a random number, so the captured
// command, replayed, decides for random identities.
const benchIdentity = "__rand_int__"

// captureScript makes Floodgate decisions on the fresh server through a
// client that records them. The store's first EVALSHA gets NOSCRIPT and the
// store resends the source with EVAL: that is the exact text redis-benchmark
// then runs, checked with SCRIPT EXISTS. The arguments of one decision per
// benchmarked algorithm are kept as redis-benchmark commands, so the
// benchmark sends exactly what the store sends.
func (r *run) captureScript(ctx context.Context) error {
	c := r.srv.Client(1)
	defer c.Close()
	h := &scriptHook{}
	c.AddHook(h)
	l, err := newLimiter(c, "rb", redisstore.Options{MaxBatch: 1}) // one decision per call: the script as redis-benchmark runs it
	if err != nil {
		return err
	}
	r.benchCmds = map[floodgate.Algorithm][]string{}
	r.scripts = map[floodgate.Algorithm]string{}
	for _, a := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.GCRA} {
		p, err := contender.OpenPolicy("rb", a)
		if err != nil {
			return err
		}
		// Single-layer decisions run a script of their algorithm's own, so
		// each algorithm's probe captures its own source.
		h.mu.Lock()
		h.src = ""
		h.mu.Unlock()
		if _, err := l.Allow(ctx, p, benchIdentity); err != nil {
			return fmt.Errorf("probe decision: %w", err)
		}
		h.mu.Lock()
		last, src, herr := h.last, h.src, h.err
		h.mu.Unlock()
		if herr != nil {
			return herr
		}
		if len(last) < 4 || last[3] != l.Key(p, benchIdentity) {
			return fmt.Errorf("captured call %q is not a one-key decision on %q", last, l.Key(p, benchIdentity))
		}
		if src == "" {
			return fmt.Errorf("%s: the store never sent EVAL (was the script already cached on the server?)", a)
		}
		ok, err := r.admin.ScriptExists(ctx, sha1Hex(src)).Result()
		if err != nil {
			return err
		}
		if len(ok) != 1 || !ok[0] {
			return fmt.Errorf("%s: the captured source's SHA-1 is not in the server's script cache", a)
		}
		r.benchCmds[a] = last[2:] // numkeys, key, arguments
		r.scripts[a] = src
	}
	return nil
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// redisBenchmark runs redis-benchmark -P 16 on the bare script and on
// Floodgate's own script, with the arguments the store sent.
func (r *run) redisBenchmark(ctx context.Context) error {
	tinySHA, err := r.admin.ScriptLoad(ctx, contender.TinyScript).Result()
	if err != nil {
		return fmt.Errorf("suite: SCRIPT LOAD: %w", err)
	}
	type line struct {
		id, name string
		random   bool
		cmd      []string
	}
	lines := []line{
		{report.BenchTiny, fmt.Sprintf("bare EVALSHA (INCR+EXPIRE), %d keys", r.cfg.Keys), true, []string{"EVALSHA", tinySHA, "1", "rb.tiny.__rand_int__", "3600"}},
		{report.BenchTinyHot, "bare EVALSHA, one hot key", false, []string{"EVALSHA", tinySHA, "1", "rb.tiny.hot", "3600"}},
	}
	for _, b := range []struct {
		id string
		a  floodgate.Algorithm
	}{{report.BenchSW, floodgate.SlidingWindow}, {report.BenchGCRA, floodgate.GCRA}} {
		src, ok := r.scripts[b.a]
		if !ok {
			continue
		}
		sha, err := r.admin.ScriptLoad(ctx, src).Result()
		if err != nil {
			return fmt.Errorf("suite: SCRIPT LOAD of Floodgate's %s script: %w", b.a, err)
		}
		cmd := append([]string{"EVALSHA", sha}, r.benchCmds[b.a]...)
		lines = append(lines, line{b.id, fmt.Sprintf("Floodgate's script, %s, %d keys", b.a, r.cfg.Keys), true, cmd})
	}
	for _, l := range lines {
		o := redisbench.Options{Bin: r.cfg.RedisBenchmark, Port: r.srv.Port, Requests: r.cfg.BenchRequests, Pipeline: 16}
		if l.random {
			o.RandomKeys = r.cfg.Keys
		}
		before, err := redisinfo.Take(ctx, r.admin)
		if err != nil {
			return err
		}
		res, err := redisbench.Run(ctx, o, l.cmd...)
		if err == nil {
			err = r.checkBench(ctx, before, int64(o.Requests))
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			if errors.Is(err, redisbench.ErrBinaryArgument) {
				r.note("redis-benchmark %s: not measured: the store's call carries its numbers packed in a binary argument, which redis-benchmark cannot send", l.name)
				continue
			}
			r.note("redis-benchmark %s: %v", l.name, err)
			continue
		}
		args := res.Args[:len(res.Args)-len(l.cmd)]
		b := report.BenchLine{ID: l.id, Name: l.name, Command: strings.Join(l.cmd, " "), Args: args, PerSecond: res.PerSecond, P50: res.P50, P99: res.P99}
		r.out.RedisBenchmark = append(r.out.RedisBenchmark, b)
		fmt.Fprintf(r.cfg.Progress, "redis-benchmark %-45s %9.0f/s  p50 %v  p99 %v\n", l.name, res.PerSecond, res.P50, res.P99)
	}
	return nil
}

// checkBench verifies, from the server's command statistics, that a
// redis-benchmark run since before made the requested number of EVALSHA
// calls and that none failed: redis-benchmark itself does not count error
// replies, so a script rejecting its arguments would look fast.
func (r *run) checkBench(ctx context.Context, before redisinfo.Snapshot, requests int64) error {
	after, err := redisinfo.Take(ctx, r.admin)
	if err != nil {
		return err
	}
	d := redisinfo.Diff(before, after, "evalsha")
	if d.Failed > 0 || d.Calls < requests {
		return fmt.Errorf("result discarded: the server counted %d EVALSHA calls, %d failed, for %d requests", d.Calls, d.Failed, requests)
	}
	return nil
}
