package servicebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Validity checks. A cell compares decisions taken by Redis: a decision a
// service answered without it (floodgate serve's fallback store when a
// Redis call misses its budget or the breaker is open; envoy-compat's
// local over-limit cache) makes the cell invalid. The services' own
// Prometheus counters are read before and after the measured window.
// Redis's INFO commandstats tells script calls from the keyed commands
// (run by the scripts or sent directly), so that a cell whose keyed
// commands fall short of what its decisions need stands out.

// errNotByRedis marks a cell in which some decisions were not taken by
// Redis.
var errNotByRedis = errors.New("decisions not taken by Redis")

// sample is one line of the Prometheus text format: a metric name, its
// labels as written between the braces, and the value.
type sample struct {
	name, labels string
	value        float64
}

// parseMetrics reads the Prometheus text exposition format: comment and
// blank lines are skipped, every other line must be a sample (name,
// optional {labels}, value, optional timestamp).
func parseMetrics(text string) ([]sample, error) {
	var out []sample
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		var s sample
		rest := line
		if i := strings.IndexAny(line, "{ \t"); i > 0 && line[i] == '{' {
			// Label values may hold '}' inside quotes: the labels end at
			// the last '}' of the line (a value never holds one).
			j := strings.LastIndexByte(line, '}')
			if j < i {
				return nil, fmt.Errorf("servicebench: metrics line %d: unclosed labels in %q", n+1, clipText(line))
			}
			s.name, s.labels, rest = line[:i], line[i+1:j], line[j+1:]
		} else if i > 0 {
			s.name, rest = line[:i], line[i:]
		} else {
			return nil, fmt.Errorf("servicebench: metrics line %d: no value in %q", n+1, clipText(line))
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("servicebench: metrics line %d: no value in %q", n+1, clipText(line))
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("servicebench: metrics line %d: %w", n+1, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, nil
}

// sumOf adds the values of the samples named name whose labels contain
// every one of match (each written as in the exposition, e.g.
// `stat="over_limit"`).
func sumOf(ss []sample, name string, match ...string) float64 {
	var sum float64
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for _, m := range match {
			if !strings.Contains(s.labels, m) {
				continue next
			}
		}
		sum += s.value
	}
	return sum
}

// notByRedis returns how many decisions service s reports having taken
// without Redis, from its metrics. floodgate serve counts each decision
// of its fallback store in rate_limit_fallback_total and each answer so
// decided in floodgate_degraded_responses_total (both for both APIs;
// older builds counted only HTTP answers in the latter): the larger is
// taken. envoy-compat answers a counter its local cache knows to be
// over the limit without Redis (LOCAL_CACHE_SIZE_IN_BYTES, off by
// default; its hits are counted under stat over_limit_with_local_cache).
// envoyproxy/ratelimit has no fallback (its local cache is off by
// default, as the harness leaves it): it is not read.
func notByRedis(s Service, ss []sample) float64 {
	switch s {
	case Serve, ServeFast:
		return max(sumOf(ss, "rate_limit_fallback_total"), sumOf(ss, "floodgate_degraded_responses_total"))
	case Compat:
		return sumOf(ss, "floodgate_envoy_hits_total", `stat="over_limit_with_local_cache"`)
	}
	return 0
}

// scrape reads the metrics at url.
func scrape(ctx context.Context, url string) ([]sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("servicebench: metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("servicebench: metrics %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("servicebench: metrics %s: %s: %s", url, resp.Status, clipText(string(b)))
	}
	return parseMetrics(string(b))
}

// fallbackCount returns what notByRedis reads at url (0 without url).
func fallbackCount(ctx context.Context, s Service, url string) (float64, error) {
	if url == "" {
		return 0, nil
	}
	ss, err := scrape(ctx, url)
	if err != nil {
		return 0, err
	}
	return notByRedis(s, ss), nil
}

// commandCounts are Redis's command counts by kind.
type commandCounts struct {
	// Scripts counts EVAL, EVALSHA (and their _RO forms) and FCALL calls.
	Scripts int64
	// Keyed counts the other data commands, those run by scripts
	// included: everything but the scripts and the connection, server and
	// transaction commands that touch no key (nonKeyed).
	Keyed int64
}

// scriptCommands are the commands that run a script.
var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

// nonKeyed are commands (or, before '|', command families) that touch no
// key: the services' and the harness's housekeeping (INFO, PING, HELLO,
// CLIENT SETNAME, SCRIPT LOAD, TIME for clock sync, MULTI/EXEC ...).
var nonKeyed = map[string]bool{
	"info": true, "ping": true, "echo": true, "hello": true, "auth": true, "select": true, "client": true,
	"script": true, "command": true, "config": true, "time": true, "multi": true, "exec": true, "discard": true,
	"quit": true, "reset": true, "readonly": true, "readwrite": true, "cluster": true, "function": true,
	"memory": true, "slowlog": true, "latency": true, "dbsize": true, "debug": true, "role": true, "wait": true,
	"lastsave": true, "watch": true, "unwatch": true,
}

// parseCommandStats counts the calls of INFO commandstats's lines
// "cmdstat_<name>:calls=N,...".
func parseCommandStats(info string) (commandCounts, error) {
	var c commandCounts
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, ok := strings.CutPrefix(calls, "calls=")
		if !ok {
			return c, fmt.Errorf("servicebench: commandstats: no calls in %q", clipText(line))
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("servicebench: commandstats %s: %w", name, err)
		}
		family, _, _ := strings.Cut(name, "|")
		switch {
		case scriptCommands[family]:
			c.Scripts += n
		case !nonKeyed[family]:
			c.Keyed += n
		}
	}
	return c, nil
}

// KeyedNeeded is the keyed Redis commands every decision of the
// comparison needs (each one is allowed): a read and a write of its
// counter. floodgate serve's fixed window reads it with GET and writes
// it with SET inside its script; envoyproxy/ratelimit and envoy-compat
// send or script INCRBY and EXPIRE.
const KeyedNeeded = 2

// keyedShort tells whether a cell's keyed commands per decision fall
// short of KeyedNeeded by more than 5% (the window's edges, and a batch
// of floodgate serve that holds one identity twice and reads and writes
// it once, may take a little off).
func keyedShort(c Cell) bool {
	return !c.Service.floor() && c.Decisions > 0 && float64(c.KeyedCommands) < 0.95*KeyedNeeded*float64(c.Decisions)
}
