// Package proctest runs a built command for a test the way a supervisor
// would: it starts the process, reads the JSON log records it writes to
// stderr until the ones announcing its listeners have appeared, hands back
// their fields (the addresses it chose), and stops the process at the end
// of the test.
//
// It only ever signals the process it started, by that process's id.
// Buffer, the thread-safe log it keeps, is also useful on its own for a
// logger's output in a test.
package proctest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// startTimeout bounds how long Start waits for the records it is told
	// to wait for. It is a bound on a hang, not a measure of speed.
	startTimeout = 60 * time.Second
	// stopTimeout bounds how long the cleanup waits for an exit after
	// SIGTERM before it sends SIGKILL.
	stopTimeout = 30 * time.Second
	// maxLine is the longest log line read; a longer one ends the reading
	// (and the output is then discarded, so the process never blocks).
	maxLine = 1 << 20
)

// Buffer is a bytes.Buffer safe for concurrent use: one goroutine may
// write while others read. The zero value is an empty buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer. It never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Record is the string fields of one JSON log record by key, such as
// "msg" and "addr".
type Record map[string]string

// Proc is a process started by Start. Its methods are safe for concurrent
// use.
type Proc struct {
	cmd     *exec.Cmd
	logs    Buffer
	done    chan struct{} // closed once the process has exited
	err     error         // what cmd.Wait returned; read after done
	records map[string]Record
}

// Start starts cmd (built by the caller, with its arguments, environment
// and directory; its Stderr must be unset) and waits until the process has
// written, on stderr, a JSON log record whose "msg" is each of msgs, in
// any order. It fails t if the process exits first or if they have not all
// appeared within a minute, showing what the process logged. With no msgs
// it returns once the process has started.
//
// In t.Cleanup, Start sends the process SIGTERM unless it has already
// exited, waits up to 30 s for it to exit and then kills it; and if t
// failed, it logs everything the process wrote to stderr.
func Start(t testing.TB, cmd *exec.Cmd, msgs ...string) *Proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{}), records: map[string]Record{}}
	name := strings.Join(append([]string{filepath.Base(cmd.Path)}, cmd.Args[1:]...), " ")
	ready := make(chan struct{})
	if len(msgs) == 0 {
		close(ready)
	}
	go func() {
		// ready is closed here only, before done: a process that logs
		// its last awaited record and exits is seen as ready.
		found := 0
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), maxLine)
		for sc.Scan() {
			line := sc.Bytes()
			p.logs.Write(line)
			p.logs.Write([]byte{'\n'})
			if found == len(msgs) {
				continue
			}
			rec, ok := parse(line)
			if !ok || !slices.Contains(msgs, rec["msg"]) {
				continue
			}
			// records is written here only, and read only after ready
			// is closed.
			if _, seen := p.records[rec["msg"]]; !seen {
				p.records[rec["msg"]] = rec
				if found++; found == len(msgs) {
					close(ready)
				}
			}
		}
		// A line too long for the scanner stops the reading: drain the
		// rest so that the process never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(stopTimeout):
				_ = cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Logs())
		}
	})
	select {
	case <-ready:
	case <-p.done:
		select {
		case <-ready:
		default:
			t.Fatalf("%s exited before logging %q: %v\n%s", name, msgs, p.err, p.Logs())
		}
	case <-time.After(startTimeout):
		t.Fatalf("%s: not all of %q logged within %v\n%s", name, msgs, startTimeout, p.Logs())
	}
	return p
}

// parse returns the string fields of a JSON log record, or false for a
// line that is not a JSON object.
func parse(line []byte) (Record, bool) {
	var raw map[string]any
	if json.Unmarshal(line, &raw) != nil {
		return nil, false
	}
	rec := Record{}
	for k, v := range raw {
		if s, ok := v.(string); ok {
			rec[k] = s
		}
	}
	return rec, true
}

// Record returns the record Start waited for whose "msg" is msg: the first
// such record the process logged. It returns nil for a message Start was
// not told to wait for.
func (p *Proc) Record(msg string) Record {
	return p.records[msg]
}

// Logged returns the first JSON log record with message msg among what
// the process has written to stderr so far, and false if there is none
// yet. Unlike Record it reads the log as it is now, so it finds records
// Start was not told to wait for, once they are written.
func (p *Proc) Logged(msg string) (Record, bool) {
	for line := range strings.Lines(p.Logs()) {
		if rec, ok := parse([]byte(line)); ok && rec["msg"] == msg {
			return rec, true
		}
	}
	return nil, false
}

// Logs returns everything the process has written to stderr so far, one
// line per line it wrote.
func (p *Proc) Logs() string { return p.logs.String() }

// Signal sends sig to the process. It returns an error once the process
// has exited.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done returns a channel closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err waits for the process to exit and returns how it ended: nil for exit
// status 0, an *exec.ExitError otherwise.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Stop sends the process SIGTERM and waits for it to exit. It returns how
// the process ended (see Err), or fails t if the process is still running
// 30 s after the signal (the cleanup then kills it).
func (p *Proc) Stop(t testing.TB) error {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		select {
		case <-p.done:
			return p.err
		default:
			t.Fatal(err)
		}
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(stopTimeout):
		t.Fatalf("%s did not exit within %v of SIGTERM", filepath.Base(p.cmd.Path), stopTimeout)
		return nil
	}
}
