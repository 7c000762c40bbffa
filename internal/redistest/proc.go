package redistest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sharedPort is the port of the machine's shared Redis; never used here.
	sharedPort = 6379
	// clusterBusOffset is the distance between a cluster node's client port
	// and its cluster bus port.
	clusterBusOffset = 10000
	// maxBusPort keeps a cluster node's bus port (port+10000) a valid port.
	maxBusPort = 55000
	// stdoutLog is the file in Dir that receives the process's stdout and
	// stderr (start-up errors are printed there before the log file opens).
	stdoutLog = "stdout.log"
	// tailBytes is how much of each log a start-up error quotes.
	tailBytes = 3000
)

// process is one started redis-server process, reaped by its own goroutine.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // cmd.Wait's result, valid once done is closed
}

// spawn starts bin with args in dir (no shell involved), sending its stdout
// and stderr to dir/stdout.log, and starts the goroutine that reaps it.
func spawn(bin string, args []string, dir string) (*process, error) {
	out, err := os.OpenFile(filepath.Join(dir, stdoutLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child keeps its own copy
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("exec %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *process) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// terminate sends SIGTERM to this process (and only to it).
func (p *process) terminate() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// kill sends SIGKILL to this process (and only to it) and waits until it has
// been reaped. Signalling a reaped process is impossible: os.Process refuses
// once Wait has returned, so a recycled pid is never hit.
func (p *process) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// startError describes a server that did not come up.
type startError struct {
	msg       string
	portTaken bool   // the port was in use: another port may work
	log       string // tail of the server's logs
}

func (e *startError) Error() string { return e.msg + e.log }

// waitReady waits until the server on addr answers PING and reports, in
// INFO server, the pid of p: a different pid means something else already
// listens on that port. It gives up when p exits or after timeout.
func waitReady(p *process, addr string, timeout time.Duration) error {
	c := adminClient(addr)
	defer c.Close()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if err := accepting(p, addr); err != nil {
			if se, ok := err.(*startError); ok {
				return se
			}
			lastErr = err
			time.Sleep(20 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		lastErr = c.Ping(ctx).Err()
		var info string
		if lastErr == nil {
			info, lastErr = c.Info(ctx, "server").Result()
		}
		cancel()
		if lastErr == nil {
			pid, err := strconv.Atoi(infoField(info, "process_id"))
			if err == nil && pid == p.pid() {
				return nil
			}
			if p.exited() || (err == nil && pid != p.pid()) {
				return &startError{
					msg:       fmt.Sprintf("%s is answered by another process (pid %d), not by ours (pid %d)", addr, pid, p.pid()),
					portTaken: true,
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &startError{msg: fmt.Sprintf("redis-server on %s did not answer PING within %v (last error: %v)", addr, timeout, lastErr)}
}

// accepting reports whether the server p started accepts connections on
// addr: nil when it does, a *startError when p has exited, and the dial's
// error otherwise. It dials by hand: go-redis would log every refused
// connection.
func accepting(p *process, addr string) error {
	if p.exited() {
		return &startError{msg: fmt.Sprintf("redis-server exited during start-up (%v)", p.err)}
	}
	conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	return conn.Close()
}

// infoField returns the value of field in INFO or CLUSTER INFO output.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// adminClient returns a small RESP2 client with short timeouts and no
// retries, used for the harness's own commands (readiness, SHUTDOWN, CLUSTER
// INFO, SENTINEL ...). The caller closes it.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(adminOptions(addr))
}

// adminSentinel is adminClient for a sentinel.
func adminSentinel(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(adminOptions(addr))
}

// adminOptions are the options of adminClient and adminSentinel.
func adminOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		Protocol:              2,
		DisableIdentity:       true,
		MaxRetries:            -1,
		DialerRetries:         1,
		PoolSize:              2,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true,
	}
}

// freePort returns a port on 127.0.0.1 that was free a moment ago. With bus
// set it also requires port+10000 to be free and port to be below 55000, as a
// cluster node binds both. The shared Redis port is never returned.
func freePort(bus bool) (int, error) {
	var lastErr error
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			lastErr = err
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := port != sharedPort && port != sharedPort+clusterBusOffset
		if ok && bus {
			ok = port < maxBusPort && port+clusterBusOffset != sharedPort
			if ok {
				lb, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+clusterBusOffset))
				if err != nil {
					ok, lastErr = false, err
				} else {
					lb.Close()
				}
			}
		}
		l.Close()
		if ok {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port found on 127.0.0.1 (last error: %v)", lastErr)
}

// logFiles returns the paths of the server's two logs.
func (s *Server) logFiles() []string {
	return []string{s.LogFile, filepath.Join(s.Dir, stdoutLog)}
}

// logSize returns the current sizes of the logs, to quote only new output.
func (s *Server) logSize() []int64 {
	var sizes []int64
	for _, f := range s.logFiles() {
		var n int64
		if fi, err := os.Stat(f); err == nil {
			n = fi.Size()
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// logTail returns the end of what the current process wrote to its logs,
// formatted to be appended to an error message.
func (s *Server) logTail() string {
	var b strings.Builder
	for i, f := range s.logFiles() {
		var from int64
		if i < len(s.logOffset) {
			from = s.logOffset[i]
		}
		text, err := readFrom(f, from)
		if err != nil || strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&b, "\n--- tail of %s ---\n%s", f, strings.TrimRight(text, "\n"))
	}
	return b.String()
}

// readFrom reads file from offset from, keeping at most its last tailBytes.
func readFrom(file string, from int64) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if fi.Size()-from > tailBytes {
		from = fi.Size() - tailBytes
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return "", err
	}
	data, err := io.ReadAll(f)
	return string(data), err
}

// logSaysPortTaken reports whether a log shows a failure to bind a port.
func logSaysPortTaken(log string) bool {
	for _, s := range []string{"Address already in use", "Failed listening on port", "Could not bind"} {
		if strings.Contains(log, s) {
			return true
		}
	}
	return false
}

// poll calls check every interval until it returns nil or ctx ends, and
// returns check's last error in the latter case.
func poll(ctx context.Context, interval time.Duration, check func(context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
	}
}
