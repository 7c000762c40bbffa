package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
)

const (
	// loadKeyDelay is --key-load-delay of a process RestartLoading
	// starts, in microseconds: the time it takes for each key it loads
	// until Loading.Finish.
	loadKeyDelay = 1000
	// loadEventBytes is its --loading-process-events-interval-bytes
	// (Redis's least): it answers clients after every 1 KiB of its
	// snapshot read, a few dozen keys, so INFO is answered within
	// tens of milliseconds while it loads.
	loadEventBytes = 1024
	// MinLoadingKeys is the fewest keys RestartLoading accepts: at
	// loadKeyDelay each, 20 s of loading before Finish, far more than a
	// test needs to look at it however slow the machine.
	MinLoadingKeys = 20000
)

// Loading is a server process RestartLoading started, loading its
// snapshot slowly until Finish.
type Loading struct {
	s   *Server
	pid int
}

// RestartLoading saves the server's data (SAVE, to dump.rdb in its Dir;
// it must hold at least MinLoadingKeys keys: DEBUG POPULATE, with
// --enable-debug-command, is quick), stops it and starts it again on the
// same port, with the same arguments and --key-load-delay 1000
// --loading-process-events-interval-bytes 1024: it loads that snapshot
// a key per millisecond and answers clients between chunks of it,
// INFO with loading:1 and most commands (PING too) with a LOADING error.
// It waits, up to 10 s, only until the new process accepts connections
// and its INFO persistence says loading:1, not for PING (Restart's
// wait). The load goes on at that pace, 20 s at least, until Finish is
// called: a test sees the server loading for as long as it needs, not
// for as long as a machine's speed allows. A later Restart starts the
// server without the delay. It fails the test if the server holds too
// few keys, or does not come up loading.
func (s *Server) RestartLoading(t testing.TB) *Loading {
	t.Helper()
	c := adminClient(s.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	n, err := c.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: DBSIZE of %s: %v", s.Addr, err)
	}
	if n < MinLoadingKeys {
		t.Fatalf("redistest: %s holds %d keys; RestartLoading needs %d at least, to load for long enough", s.Addr, n, MinLoadingKeys)
	}
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatalf("redistest: SAVE on %s: %v", s.Addr, err)
	}
	s.Stop()
	slow := []string{"--key-load-delay", strconv.Itoa(loadKeyDelay), "--loading-process-events-interval-bytes", strconv.Itoa(loadEventBytes)}
	for attempt := 0; attempt < startAttempts; attempt++ {
		if err = s.launchWith(slow, waitLoading); err == nil {
			return &Loading{s: s, pid: s.Pid}
		}
		var se *startError
		if !errors.As(err, &se) || !se.portTaken {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("redistest: restarting redis-server on %s to load its snapshot: %v", s.Addr, err)
	return nil
}

// Finish lets the server load the rest of its snapshot at full speed
// (CONFIG SET key-load-delay 0, which Redis takes while it loads) and
// waits, up to 10 s, until the process RestartLoading started answers
// PING: it is done loading. It fails the test otherwise.
func (l *Loading) Finish(t testing.TB) {
	t.Helper()
	c := adminClient(l.s.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	err := poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		return c.ConfigSet(ctx, "key-load-delay", "0").Err()
	})
	if err != nil {
		t.Fatalf("redistest: CONFIG SET key-load-delay 0 on %s: %v%s", l.s.Addr, err, l.tail())
	}
	err = poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
		info, err := c.Info(ctx, "server", "persistence").Result()
		if err != nil {
			return err
		}
		if pid := infoField(info, "process_id"); pid != strconv.Itoa(l.pid) {
			return fmt.Errorf("answered by pid %s, not %d", pid, l.pid)
		}
		if v := infoField(info, "loading"); v != "0" {
			return fmt.Errorf("INFO persistence loading:%s", v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: %s did not finish loading: %v%s", l.s.Addr, err, l.tail())
	}
}

// tail is the server's log tail, for an error message.
func (l *Loading) tail() string {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.logTail()
}

// waitLoading waits until the server on addr accepts connections and
// reports, in INFO server and persistence, the pid of p and loading:1.
// A process done loading already is an error: its load was too short
// to be seen. It gives up when p exits or after timeout.
func waitLoading(p *process, addr string, timeout time.Duration) error {
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
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := c.Info(ctx, "server", "persistence").Result()
		cancel()
		if err != nil {
			lastErr = err
			time.Sleep(20 * time.Millisecond)
			continue
		}
		pid, err := strconv.Atoi(infoField(info, "process_id"))
		switch {
		case err != nil || pid != p.pid():
			return &startError{
				msg:       fmt.Sprintf("%s is answered by another process (pid %s), not by ours (pid %d)", addr, infoField(info, "process_id"), p.pid()),
				portTaken: true,
			}
		case infoField(info, "loading") == "1":
			return nil
		default:
			return &startError{msg: fmt.Sprintf("redis-server on %s was done loading (loading:%s, %s keys) when first asked: too few keys to see it load",
				addr, infoField(info, "loading"), infoField(info, "rdb_last_load_keys_loaded"))}
		}
	}
	return &startError{msg: fmt.Sprintf("redis-server on %s did not report loading:1 within %v (last error: %v)", addr, timeout, lastErr)}
}
