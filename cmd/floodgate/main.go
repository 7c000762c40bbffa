// Command floodgate is Floodgate's binary: the rate limit service (serve),
// a one-off decision against it (check), configuration tools (config), the
// incident demo (demo incident), a load generator (loadtest) and a
// read-only audit of a deployment (doctor).
//
// It only wires flags to the packages that hold the logic: config, server,
// incident, envoyrls and loadgen.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/floodgate-rl/floodgate/internal/buildinfo"
)

// version names the release this binary was built from when stamped at
// link time: release builds stamp it with -ldflags
// "-X main.version=v1.2.3" (deploy/build-image.sh does). Empty, as in a
// plain go build, the version comes from the build information Go embeds
// (buildinfo.Read): the main module's version (a pseudo-version such as
// v0.0.0-20261206222540-d241fc6024f9 for a go build in a Git checkout),
// else dev (go run, a Git worktree, -buildvcs=false, a source export).
var version string

// build is the build this binary is: "floodgate --version" and "floodgate
// version" print it, /readyz, floodgate_build_info and the listening
// lines report it.
var build = buildinfo.Read(version)

// buildAttrs are the log attributes naming the build b: "version", as
// /readyz and floodgate_build_info name it, and "revision" when known. A
// configuration's version is logged as "config_version", never "version".
func buildAttrs(b buildinfo.Info) []any {
	attrs := []any{"version", b.Version}
	if b.Revision != "" {
		attrs = append(attrs, "revision", b.Revision)
	}
	return attrs
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries an exit code other than 1 (for example 2 for "denied"
// from check) or an error already reported.
type exitError struct {
	code int
	err  error // nil when already reported
}

func (e *exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	err = listCommands(root, args, err)
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "floodgate:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "floodgate:", err)
	return 1
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "floodgate",
		Short: "A distributed rate limiter backed by Redis",
		Long: `Floodgate decides rate limits atomically: every decision is one step,
in process or as one Lua script on Redis, so concurrent requests can never
slip past a limit.

Run the service with "floodgate serve" (in memory, or --redis URL), ask it
for a decision with "floodgate check", and see the race it prevents with
"floodgate demo incident".`,
		Version:       build.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServeCmd(), newCheckCmd(), newConfigCmd(), newDemoCmd(), newLoadtestCmd(), newDoctorCmd())
	root.AddCommand(newEnvoyCompatCmd(), newVersionCmd())
	// cobra's completion command, made now rather than at Execute, so
	// that an unknown shell ("completion tcsh") fails as a mistyped
	// subcommand of config or demo does, instead of printing the help
	// and exiting 0.
	root.InitDefaultCompletionCmd()
	// cobra's help command, made now too, so that an unknown topic
	// ("help bogus", "help config bogus") fails listing the commands, as
	// an unknown command does; it printed "Unknown help topic" and the
	// usage, and exited 0.
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "completion":
			c.Args, c.RunE = cobra.ArbitraryArgs, groupRun
		case "help":
			c.Run, c.RunE = nil, helpRun
		}
	}
	return root
}

// helpRun prints the help of the command its arguments name, or fails
// naming the commands there are when they name none.
func helpRun(c *cobra.Command, args []string) error {
	root := c.Root()
	target, rest, err := root.Find(args)
	if err != nil || target == nil {
		// A first word that names no command (cobra's error for it
		// lists none).
		return unknownCommand(root, "help topic", args[0])
	}
	if len(rest) > 0 {
		// A word after a command that has no such subcommand: cobra
		// leaves it to the command as an argument.
		return unknownCommand(target, "help topic", rest[0])
	}
	target.InitDefaultHelpFlag()
	target.InitDefaultVersionFlag()
	return target.Help()
}

// listCommands returns, for cobra's error for an unknown top-level command
// (which lists none, as "floodgate config nope" does), one that lists
// them; any other err as it is.
func listCommands(root *cobra.Command, args []string, err error) error {
	c, _, ferr := root.Find(args)
	if ferr == nil || c != root || ferr.Error() != err.Error() {
		return err
	}
	for _, a := range args {
		// The root's only flags (--help, --version) take no value: the
		// first other word is the command.
		if !strings.HasPrefix(a, "-") {
			return unknownCommand(root, "command", a)
		}
	}
	return err
}

// newVersionCmd is "floodgate version": what --version prints, then the
// Go release that compiled the binary and the VCS revision and commit
// time it was built from, when known.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the release this binary was built from, its Go release and VCS revision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(cmd.OutOrStdout(), versionText(cmd.Root().DisplayName(), build))
			return err
		},
	}
}

// versionText is what "floodgate version" prints for the build b of the
// command name: the line --version prints, then a line each for the Go
// release, the revision (with " (modified)" for a tree with uncommitted
// changes) and its commit time, the last two only when known.
func versionText(name string, b buildinfo.Info) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s version %s\n", name, b.Version)
	fmt.Fprintf(&sb, "go version: %s\n", b.GoVersion)
	if b.Revision != "" {
		modified := ""
		if b.Modified {
			modified = " (modified)"
		}
		fmt.Fprintf(&sb, "revision: %s%s\n", b.Revision, modified)
	}
	if b.Time != "" {
		fmt.Fprintf(&sb, "commit time: %s\n", b.Time)
	}
	return sb.String()
}

// newLogger returns a slog logger writing to w in format ("json" or
// "text") at level ("debug", "info", "warn", "error").
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "json":
		// Durations as text ("3s"), as the text format writes them, rather
		// than encoding/json's bare nanoseconds ("delay":3000000000).
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", format)
}

// redisLogger routes go-redis's log lines (dial failures, pool and
// cluster state messages) into the service's slog logger, at the level
// redisLineLevel gives, each distinct message format at most once per
// interval; but a primary's notice (alwaysLogged) is never held back, at
// Info for the start's and Warn for a failover's (masterLevel).
type redisLogger struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	// masters is the address each Sentinel master name was last found
	// at (see masterLevel).
	masters map[string]string
}

// alwaysLogged reports whether go-redis's line of format says a failover
// happened ("sentinel: new master=%q addr=%q": the client now writes to
// another server). Such lines are rare and an operator needs each one, so
// they are not rate-limited: rate-limiting by format hid a failover within
// the interval of the start (whose first master is logged in the same
// format) or of another failover.
func alwaysLogged(format string) bool {
	return strings.HasPrefix(format, "sentinel: new master")
}

func newRedisLogger(log *slog.Logger, every time.Duration) *redisLogger {
	return &redisLogger{log: log, every: every, last: map[string]time.Time{}}
}

// Printf implements go-redis's internal.Logging.
func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if alwaysLogged(format) {
		l.log.Log(ctx, l.masterLevel(v), "redis client", "detail", fmt.Sprintf(format, v...))
		return
	}
	now := time.Now()
	l.mu.Lock()
	if t, ok := l.last[format]; ok && now.Sub(t) < l.every {
		l.mu.Unlock()
		return
	}
	if len(l.last) > 1000 {
		clear(l.last)
	}
	l.last[format] = now
	l.mu.Unlock()
	l.log.Log(ctx, redisLineLevel(format), "redis client", "detail", fmt.Sprintf(format, v...))
}

// masterLevel is the level of go-redis's "sentinel: new master=%q
// addr=%q" line with arguments v: Info the first time a master name is
// found (every start behind Sentinel logs it, and a start is not a
// warning) or found again at the same address, Warn when its address
// changed (a failover: the client now writes to another server).
func (l *redisLogger) masterLevel(v []any) slog.Level {
	if len(v) < 2 {
		return slog.LevelWarn
	}
	name, addr := fmt.Sprint(v[0]), fmt.Sprint(v[1])
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.masters == nil {
		l.masters = map[string]string{}
	}
	prev, seen := l.masters[name]
	l.masters[name] = addr
	if seen && prev != addr {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// redisLineLevel is the level of one of go-redis's lines: Info for those
// that report a healthy step (the sentinel it asks, a sentinel it learned
// of), Warn for the others (failures, a switch of primary). A healthy
// Sentinel set-up logged a warning at every start ("sentinel: selected
// addr=..."), in serve and in doctor alike.
func redisLineLevel(format string) slog.Level {
	if strings.HasPrefix(format, "sentinel: selected addr") || strings.HasPrefix(format, "sentinel: discovered new sentinel") {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
