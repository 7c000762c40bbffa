package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/incident"
)

func newDemoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Demonstrations",
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
--redis (its keys get a unique prefix and are deleted afterwards).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Start = start
			opts.StartAtZero = cmd.Flags().Changed("start") && start == 0
			prefix := "fgdemo-" + randomHex(6)
			var env incident.Env
			var err error
			if redisURL == "" {
				env, err = incident.Memory(prefix)
			} else {
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
	fl.DurationVar(&opts.Gap, "gap", 2*time.Millisecond, "time the naive limiter spends between GET and INCR")
	return cmd
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
