package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// repeatWindow is how soon after the SIGINT or SIGTERM that started the
// shutdown the same signal again is taken as a repeated delivery of that
// one stop request rather than a second one. GNU timeout(1) sends its
// signal to the command and then to its own process group, the command
// included, so that "timeout 10 floodgate serve" gets SIGTERM twice
// within microseconds (some supervisors and shells that forward a
// terminal's signal to their process group do the same); taken as a
// second signal, it abandoned the drain at once and cut the requests in
// flight. A person pressing Ctrl-C again, or a supervisor sending its
// second SIGTERM at the end of a grace period, comes later than this:
// well under a second, so that a second Ctrl-C still ends the process
// (one pressed within the window is a third press away from it).
const repeatWindow = 250 * time.Millisecond

// notifyStop returns a copy of ctx that is done at the first SIGINT or
// SIGTERM, which starts the shutdown, and release, which the caller
// defers: before any signal, it gives SIGINT and SIGTERM back their
// default action. After the first, the same signal again within
// repeatWindow is a repeated delivery of it (see repeatedDelivery): the first
// such is logged at INFO ("signal repeated: ...") and the shutdown goes
// on. Any other SIGINT or SIGTERM, until the process exits, is a
// deliberate second signal: it is logged at ERROR ("second signal:
// exiting at once, " and abandoned, what it cuts short, with the time
// since the first) and raised again with its default action, so that the
// process dies by it; a signal ignored when the process started, which
// would stay ignored, makes it exit with status 128 + the signal's
// number instead (a second SIGINT logged "exiting at once" and the
// process drained on; review15).
func notifyStop(ctx context.Context, log *slog.Logger, abandoned string) (_ context.Context, release func()) {
	// A signal ignored when the process started (SIGINT, for a job a
	// shell script runs in the background) is ignored again after
	// signal.Reset: raising it ends nothing, so such a process exits.
	ignored := map[syscall.Signal]bool{syscall.SIGINT: signal.Ignored(syscall.SIGINT), syscall.SIGTERM: signal.Ignored(syscall.SIGTERM)}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(ctx)
	released := make(chan struct{})
	go func() {
		var (
			first    syscall.Signal // 0 until the first signal
			firstAt  time.Time
			repeatOK = true // the repeat not yet logged
		)
		done := released
		for {
			select {
			case <-done:
				if first == 0 {
					signal.Stop(sigs)
					return
				}
				// The shutdown has started: a second signal still ends
				// what is left of it (the probes' and admin listeners).
				done = nil
			case s := <-sigs:
				sig, now := s.(syscall.Signal), time.Now()
				switch {
				case first == 0:
					first, firstAt = sig, now
					cancel()
				case repeatedDelivery(first, firstAt, sig, now):
					if repeatOK {
						repeatOK = false
						log.Info("signal repeated: the same stop request, the shutdown goes on", "signal", sig.String(), "since_first", now.Sub(firstAt))
					}
				default:
					log.Error("second signal: exiting at once, "+abandoned, "signal", sig.String(), "since_first", now.Sub(firstAt))
					if ignored[sig] {
						// The shell's convention for a death by signal.
						os.Exit(128 + int(sig))
					}
					signal.Reset(sig)
					raise(sig)
				}
			}
		}
	}()
	return ctx, func() {
		select {
		case <-released:
		default:
			close(released)
		}
		cancel()
	}
}

// repeatedDelivery reports whether sig, received at now, is a repeated delivery of
// first, the signal that started the shutdown when it was received at
// firstAt, rather than a deliberate second signal: the same signal, less
// than repeatWindow later.
func repeatedDelivery(first syscall.Signal, firstAt time.Time, sig syscall.Signal, now time.Time) bool {
	return sig == first && now.Sub(firstAt) < repeatWindow
}
