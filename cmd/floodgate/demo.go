package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/incident"
)

func newDemoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Demonstrations",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newIncidentCmd())
	return cmd
}

func newIncidentCmd() *cobra.Command {
	var (
		redisURL string
		opts     incident.Options
		start    int64
	)
	cmd := &cobra.Command{
		Use:   "incident",
		Short: "Reproduce the GET-check-INCR race next to Floodgate's atomic limiter",
		Long: `Reproduce the incident behind Floodgate: an API allowed 1000 requests per
hour per key with GET → compare → INCR; 50 requests arriving together at
count 998 all read 998, all passed, and the counter reached 1048.

The same burst then goes through Floodgate's limiter, which lets exactly
the 2 requests that fit. Runs in memory, or against a real Redis with
--redis (its keys get a unique prefix and are deleted afterwards; the
connections the burst needs are opened before it, as in a running
application's pool, so that it races over open connections rather than
dialing). The race is real, not scripted: a loaded machine may let a few
fewer through.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Limit < 1 || opts.Requests < 1 {
				return fmt.Errorf("--limit %d, --requests %d: want at least 1 each", opts.Limit, opts.Requests)
			}
			if opts.Gap <= 0 || opts.Gap > incident.MaxGap {
				// The library reads a zero Gap as its default (2ms).
				return fmt.Errorf("--gap %v: want above 0 and at most %v (1ns for next to no pause)", opts.Gap, incident.MaxGap)
			}
			opts.Start = start
			opts.StartAtZero = cmd.Flags().Changed("start") && start == 0
			prefix := "fgdemo-" + randomHex(6)
			var env incident.Env
			var err error
			if redisURL == "" {
				env, err = incident.Memory(prefix)
			} else {
				// go-redis's own lines (a failed dial per retry) are
				// dropped, as doctor drops them: the error says what went
				// wrong, and an outside walk saw a WARN line printed
				// before it.
				redis.SetLogger(newRedisLogger(slog.New(slog.DiscardHandler), time.Minute))
				rs := config.Redis{URL: redisURL, PoolSize: max(opts.Requests, 64)}
				client, cerr := rs.Client()
				if cerr != nil {
					return cerr
				}
				defer client.Close()
				env, err = incident.Redis(client, prefix, rs.String())
			}
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			rep, err := incident.Run(ctx, env, opts)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&redisURL, "redis", "", "run against this Redis (redis://host:port/db) instead of in memory")
	fl.Int64Var(&opts.Limit, "limit", 1000, "requests allowed per hour")
	fl.Int64Var(&start, "start", 0, "counter value when the burst arrives (default: limit-2)")
	fl.IntVar(&opts.Requests, "requests", 50, "requests arriving at once")
	fl.DurationVar(&opts.Gap, "gap", 2*time.Millisecond, "time the naive limiter spends between GET and INCR (above 0, at most 1s)")
	return cmd
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// groupRun is the RunE of a command that only groups others ("config",
// "demo"): alone it prints its help; with an argument, which names no
// subcommand of it, it fails, so that a mistyped subcommand is an error
// (exit status 1) rather than a help page and success.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	return unknownCommand(cmd, "command", args[0])
}

// unknownCommand is the error for name, which names no subcommand of cmd
// ("command", or "help topic" for floodgate help): it lists those there
// are, and the likely one when name is close to one of them.
func unknownCommand(cmd *cobra.Command, what, name string) error {
	names := make([]string, 0, len(cmd.Commands()))
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("unknown %s %q: %q has no subcommands", what, name, cmd.CommandPath())
	}
	msg := fmt.Sprintf("unknown %s %q for %q (want one of: %s)", what, name, cmd.CommandPath(), strings.Join(names, ", "))
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf(": did you mean %q?", s[0])
	}
	return errors.New(msg)
}
