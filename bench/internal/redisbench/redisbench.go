// Package redisbench runs redis-benchmark against a server and reads its
// CSV report: the throughput Redis itself can reach for one command, the
// ceiling a client library is compared with.
package redisbench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ErrConfig reports invalid Options.
var ErrConfig = errors.New("redisbench: invalid options")

// Options describes one redis-benchmark run.
type Options struct {
	// Bin is the redis-benchmark executable. Default "redis-benchmark".
	Bin string
	// Port is the server's port on 127.0.0.1 (required; never 6379).
	Port int
	// Requests is -n, the total number of requests (≥ 1).
	Requests int
	// Pipeline is -P, the number of requests in flight per connection.
	// Default 1.
	Pipeline int
	// Clients is -c, the number of connections. Default 50.
	Clients int
	// RandomKeys is -r: __rand_int__ in the command is replaced by a random
	// number below it. 0 leaves the command as it is.
	RandomKeys int
	// Threads is --threads; 0 keeps redis-benchmark's single thread.
	Threads int
}

// Result is what redis-benchmark reported.
type Result struct {
	// Command is the command line as redis-benchmark printed it.
	Command string
	// PerSecond is requests per second.
	PerSecond float64
	// P50 and P99 are its latency percentiles (per request, pipelining
	// included).
	P50, P99 time.Duration
	// Args are the arguments redis-benchmark was run with.
	Args []string
}

// ErrBinaryArgument is returned for a command with an argument holding a
// NUL byte (a script's packed binary argument): redis-benchmark formats
// its command with strlen and would send it cut short.
var ErrBinaryArgument = errors.New("redisbench: binary argument")

// Args returns the command line (without the executable) for running
// command under o.
func (o Options) Args(command ...string) ([]string, error) {
	if o.Port <= 0 || o.Port > 65535 || o.Port == 6379 {
		return nil, fmt.Errorf("%w: port %d (want a private server's port, never 6379)", ErrConfig, o.Port)
	}
	if o.Requests < 1 {
		return nil, fmt.Errorf("%w: requests %d < 1", ErrConfig, o.Requests)
	}
	if o.Pipeline < 0 || o.Clients < 0 || o.RandomKeys < 0 || o.Threads < 0 {
		return nil, fmt.Errorf("%w: negative pipeline, clients, random keys or threads", ErrConfig)
	}
	if len(command) == 0 {
		return nil, fmt.Errorf("%w: no command", ErrConfig)
	}
	for i, a := range command {
		if strings.IndexByte(a, 0) >= 0 {
			// redis-benchmark formats its command with strlen: the
			// argument would be cut at the NUL.
			return nil, fmt.Errorf("%w: argument %d of the command holds a NUL byte, which redis-benchmark cannot send", ErrBinaryArgument, i)
		}
	}
	if o.Pipeline == 0 {
		o.Pipeline = 1
	}
	if o.Clients == 0 {
		o.Clients = 50
	}
	args := []string{
		"-h", "127.0.0.1",
		"-p", strconv.Itoa(o.Port),
		"-n", strconv.Itoa(o.Requests),
		"-P", strconv.Itoa(o.Pipeline),
		"-c", strconv.Itoa(o.Clients),
	}
	if o.RandomKeys > 0 {
		args = append(args, "-r", strconv.Itoa(o.RandomKeys))
	}
	if o.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(o.Threads))
	}
	args = append(args, "--csv")
	return append(args, command...), nil
}

// Run runs redis-benchmark with command under o and returns its report.
func Run(ctx context.Context, o Options, command ...string) (Result, error) {
	args, err := o.Args(command...)
	if err != nil {
		return Result{}, err
	}
	bin := o.Bin
	if bin == "" {
		bin = "redis-benchmark"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("redisbench: %s: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	r, err := Parse(stdout.String())
	if err != nil {
		return Result{}, fmt.Errorf("%w (stderr: %s)", err, strings.TrimSpace(stderr.String()))
	}
	r.Args = args
	return r, nil
}

// Parse reads the first result row of redis-benchmark's --csv output.
func Parse(out string) (Result, error) {
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return Result{}, fmt.Errorf("redisbench: bad CSV: %w", err)
	}
	if len(rows) < 2 {
		return Result{}, fmt.Errorf("redisbench: no result row in %q", out)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	row := rows[1]
	get := func(name string) (float64, error) {
		i, ok := col[name]
		if !ok || i >= len(row) {
			return 0, fmt.Errorf("redisbench: no %q column in %q", name, out)
		}
		v, err := strconv.ParseFloat(row[i], 64)
		if err != nil {
			return 0, fmt.Errorf("redisbench: %s = %q: %w", name, row[i], err)
		}
		return v, nil
	}
	var r Result
	if i, ok := col["test"]; ok && i < len(row) {
		r.Command = row[i]
	}
	if r.PerSecond, err = get("rps"); err != nil {
		return Result{}, err
	}
	p50, err := get("p50_latency_ms")
	if err != nil {
		return Result{}, err
	}
	p99, err := get("p99_latency_ms")
	if err != nil {
		return Result{}, err
	}
	r.P50 = time.Duration(p50 * float64(time.Millisecond))
	r.P99 = time.Duration(p99 * float64(time.Millisecond))
	return r, nil
}
