package servicebench

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one service process started by the harness, stopped by its
// own pid. Its output goes to a log file in its directory.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

// startProcess runs bin with args in dir, with exactly the environment
// env (nothing is inherited, so a variable of the caller's shell cannot
// change a service's settings) plus PATH and HOME.
func startProcess(bin string, args, env []string, dir string) (*process, error) {
	logPath := filepath.Join(dir, filepath.Base(bin)+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("servicebench: exec %s: %w", bin, err)
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process (SIGTERM, then SIGKILL after 5 s), signalling its
// own pid only. It is safe to call more than once.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail returns the end of the process's output, for error messages.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	s := strings.TrimSpace(string(b))
	if len(s) > 1500 {
		s = "…" + s[len(s)-1500:]
	}
	return s
}

// freePorts returns n distinct loopback ports that were free a moment
// ago, never the shared Redis port.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("servicebench: free port: %w", err)
		}
		lns = append(lns, l)
		if p := l.Addr().(*net.TCPAddr).Port; p != 6379 {
			ports = append(ports, p)
		}
		if len(lns) > n+10 {
			return nil, errors.New("servicebench: no free loopback ports")
		}
	}
	return ports, nil
}
