package main

import (
	"slices"
	"sync"
	"time"
)

// watchWait bounds how long serve, once it has drained, waits for the
// goroutines watching its sources (the configuration files and Redis
// document, the certificate, SIGHUP, the clock, the heartbeat) to return:
// their context ended at the signal, so one still running is blocked in
// a call that ignores it, such as a read of a hung network mount.
const watchWait = 2 * time.Second

// watchGroup runs named goroutines and waits for them for a bounded time,
// so that one blocked for good (a read that never returns) does not keep
// the process from exiting. It is safe for concurrent use.
type watchGroup struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[string]int // goroutines running, by name
}

// Go runs fn in a goroutine counted under name.
func (g *watchGroup) Go(name string, fn func()) {
	g.mu.Lock()
	if g.running == nil {
		g.running = map[string]int{}
	}
	g.running[name]++
	g.mu.Unlock()
	g.wg.Go(func() {
		defer func() {
			g.mu.Lock()
			if g.running[name]--; g.running[name] == 0 {
				delete(g.running, name)
			}
			g.mu.Unlock()
		}()
		fn()
	})
}

// Wait waits for the goroutines to return, for at most d, and returns the
// names of those still running then, sorted (nil when all returned). Those
// are abandoned: Wait does not wait for them again.
func (g *watchGroup) Wait(d time.Duration) []string {
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var names []string
	for n := range g.running {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
