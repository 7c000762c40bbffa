package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/ratelog"
	"github.com/floodgate-rl/floodgate/internal/redact"
)

// probeLogEvery is how often at most probeLog writes a line.
const probeLogEvery = 5 * time.Second

// probeLog logs the background probes of open breakers whose failure has
// another reason than the one last logged for that breaker (the error
// that opened it, or an earlier probe's): a Redis restarting refuses
// connections, then answers LOADING for seconds, then takes the probes;
// one whose password changed answers NOAUTH or WRONGPASS. It writes at
// most one line per interval, for all breakers together; a change not
// written for that is written at the breaker's next probe after the
// interval, if its reason still differs from the one logged (so the log
// ends with the current reason, and a probe flapping between two reasons
// writes one line per interval, not one per probe). A probe that succeeds
// is not logged: the breaker's closing is. Safe for concurrent use.
type probeLog struct {
	log   *slog.Logger
	every time.Duration

	mu     sync.Mutex
	last   time.Time         // when a line was last written
	logged map[string]string // open breaker's partition -> the reason last logged
}

func newProbeLog(log *slog.Logger, every time.Duration) *probeLog {
	return &probeLog{log: log, every: every, logged: map[string]string{}}
}

// changed records partition's breaker changing to s, because of cause
// when it opened.
func (p *probeLog) changed(partition string, s fallback.BreakerState, cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s == fallback.BreakerOpen {
		p.logged[partition] = failureReason(cause)
		return
	}
	delete(p.logged, partition)
}

// probed records a probe of partition's open breaker, failed with err
// (nil: it succeeded).
func (p *probeLog) probed(partition string, err error) {
	if err == nil || errors.Is(err, fallback.ErrPartitionGone) {
		return // the closing, or the breaker's drop, is logged
	}
	reason := failureReason(err)
	now := time.Now()
	p.mu.Lock()
	before, open := p.logged[partition]
	if !open || reason == before || now.Sub(p.last) < p.every {
		p.mu.Unlock()
		return
	}
	p.logged[partition] = reason
	p.last = now
	p.mu.Unlock()
	p.log.Warn("circuit breaker open: Redis fails its health probe for another reason", "partition", partition, "error", err, "before", before)
}

// failureReason names the kind of a Redis call's failure, without what
// varies from one call to the next (ports, a timeout's address): the
// code of an error reply (LOADING, NOAUTH, WRONGPASS, NOPERM, READONLY,
// OOM...), "timeout", "connection refused", "connection reset",
// "connection closed", or the error's text. nil is "ok".
func failureReason(err error) string {
	var reply redis.Error
	var op *net.OpError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &reply):
		code, _, _ := strings.Cut(reply.Error(), " ")
		return code
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.As(err, &op):
		if t, ok := op.Err.(net.Error); ok && t.Timeout() {
			return "timeout"
		}
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}

// fallbackLogEvery is how often at most logFallbacks writes a line for
// one reason.
const fallbackLogEvery = 10 * time.Second

// maxFallbackErrLog bounds the error text of a degraded decision's line:
// a foreign value's names the decision's keys.
const maxFallbackErrLog = 1000

// fallbackLogMsg is the message of logFallbacks's lines.
const fallbackLogMsg = "decisions taken by the fallback, not by Redis: each policy's failure mode answered (rate_limit_fallback_total counts them all)"

// logFallbacks returns serve's fallback.Options.OnFallback: a WARN line
// for a decision taken by the failure mode, at most one per every for
// each reason (timeout, unavailable, indeterminate, breaker_open, error,
// foreign_value), with the error of the first decision of the interval
// and, from the second line on, how many decisions of that reason were
// not logged since the last line ("suppressed"). Decisions that fell back
// without opening the breaker (Redis at maxclients refusing new
// connections: an outside walk counted 47, all reason unavailable) were
// logged nowhere, and an operator grepping the log found nothing. It is
// called on degraded decisions only; a suppressed one costs a mutex and
// no allocation. Safe for concurrent use.
func logFallbacks(log *slog.Logger, every time.Duration) func(fallback.Reason, error) {
	rl := ratelog.New(log, every)
	return func(r fallback.Reason, err error) {
		if !log.Enabled(context.Background(), slog.LevelWarn) {
			return
		}
		reason := r.String()
		suppressed, due := rl.Due(reason)
		if !due {
			return
		}
		text := "none"
		if err != nil {
			text = clip.Text(err.Error(), maxFallbackErrLog)
		}
		args := []any{"reason", reason, "error", text}
		if suppressed > 0 {
			args = append(args, "suppressed", suppressed)
		}
		log.Warn(fallbackLogMsg, args...)
	}
}

// fallbackDebugMsg is the message of logEachFallback's lines.
const fallbackDebugMsg = "decision taken by the fallback, not by Redis"

// logEachFallback returns serve's fallback.Options.OnDegraded: at debug
// level, one line per decision taken by a failure mode, with the
// decision's policy (its first layer's, the text before the first "." of
// "policy.layer": serve's policy names hold no "."; for an Envoy
// descriptor, whose name is its domain, a ".", its path and a hash, that
// is the domain only when the domain holds no "."), its layers' full names
// and storage keys, the mode applied (local, open, closed), the reason
// (timeout, unavailable, indeterminate, breaker_open, error,
// foreign_value) and the Redis error (clipped as logFallbacks's). It
// carries no identity, as httplimit's lines do not: the keys and the
// error go through redact.Keys, each key's {hash tag}, the encoded
// identity, written {…} ("fg:api.monthly:qt:{…}:m2026-12"; the raw keys
// logged before carried user IDs, addresses and API keys, a reviewer
// found). A foreign value's key, which an operator must delete, is named
// in full only by the held-back lines (logFallbacks's and the server's
// foreign-value one). Nothing is held back: it is for a while,
// not under full load. Below debug it returns after the logger's Enabled
// check, building nothing and allocating nothing. Safe for concurrent use.
func logEachFallback(log *slog.Logger) func(context.Context, fallback.Degraded) {
	return func(ctx context.Context, d fallback.Degraded) {
		if !log.Enabled(ctx, slog.LevelDebug) {
			return
		}
		names := make([]string, len(d.Layers))
		keys := make([]string, len(d.Layers))
		for i, l := range d.Layers {
			names[i], keys[i] = l.Policy.Name, redact.Keys(l.Key)
		}
		policy := ""
		if len(names) > 0 {
			policy, _, _ = strings.Cut(names[0], ".")
		}
		text := "none"
		if d.Err != nil {
			text = redact.Keys(clip.Text(d.Err.Error(), maxFallbackErrLog))
		}
		log.LogAttrs(ctx, slog.LevelDebug, fallbackDebugMsg,
			slog.String("policy", policy), slog.Any("layers", names), slog.Any("keys", keys),
			slog.String("mode", d.Mode.String()), slog.String("reason", d.Reason.String()), slog.String("error", text))
	}
}
