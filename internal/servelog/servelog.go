// Package servelog routes what servers say about their listeners to the
// process's structured log, rate limited: net/http's ErrorLog lines
// (ErrorLog) and the accept failures of any listener (Listener). Out of
// file descriptors, net/http retries its accept with a pause growing from
// 5 ms to 1 s and logged each retry in Go's plain log format (30 lines in
// 10 s from one listener, breaking a JSON log), and gRPC logged none.
package servelog

import (
	"errors"
	stdlog "log"
	"log/slog"
	"net"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/ratelog"
)

// KindAccept is the ratelog kind of a failed accept, shared with
// fasthttp's accept retries in package server, so that one accept storm
// gives at most one line per interval whichever server met it.
const KindAccept = "accept-retry"

// ErrorLog returns a log.Logger for an http.Server's ErrorLog: each line
// becomes a warning of log, and the lines one client or a descriptor
// shortage can repeat without end are written at most once per rl's
// interval, with the count held back: accept failures ("http: Accept
// error"), under KindAccept, and failed TLS handshakes.
func ErrorLog(log *slog.Logger, rl *ratelog.Log) *stdlog.Logger {
	return stdlog.New(writer{log: log, rl: rl}, "", 0)
}

type writer struct {
	log *slog.Logger
	rl  *ratelog.Log
}

func (w writer) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	switch {
	case strings.HasPrefix(line, "http: Accept error"):
		w.rl.Warn(KindAccept, "accepting a connection failed; retrying", "detail", line)
	case strings.Contains(line, "TLS handshake error"):
		w.rl.Warn("tls-handshake", "TLS handshake failed", "detail", line)
	default:
		w.log.Warn(line)
	}
	return len(p), nil
}

// Listener returns ln whose failed accepts are logged through rl under
// KindAccept ("accepting a connection failed", with the error and the
// listener's address), at most once per rl's interval; the error is
// returned as it was, for the server to retry or stop. A closed
// listener's net.ErrClosed is not logged.
func Listener(ln net.Listener, rl *ratelog.Log) net.Listener {
	return &listener{Listener: ln, rl: rl, addr: ln.Addr().String()}
}

type listener struct {
	net.Listener
	rl   *ratelog.Log
	addr string
}

// Accept implements net.Listener.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		l.rl.Warn(KindAccept, "accepting a connection failed", "error", err, "listener", l.addr)
	}
	return c, err
}
