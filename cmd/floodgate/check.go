package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/floodgate-rl/floodgate/server"
)

// exitDenied is check's exit status for a denied request.
const exitDenied = 2

// servicePeekHint is the service's hint for a cost below 1 (server's
// checkCost), which names its peek endpoint.
const servicePeekHint = "(use /v1/peek to check without consuming)"

func newCheckCmd() *cobra.Command {
	var (
		addr, policy string
		ids          []string
		cost         int64
		peek, asJSON bool
		timeout      time.Duration
		clientTLS    clientTLSFlags
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Ask a running service for one decision",
		Long: `Ask a running service for one decision and print it.

  floodgate check --addr http://127.0.0.1:8080 --policy api --id user=42 --cost 1

A decision the service took without Redis (its fallback: Redis down, slow
or its circuit breaker open) is marked with a DEGRADED line naming the
failure mode and the reason: it is not the shared count, and the exit
status is still that of the decision.

With --json it prints the service's JSON answer, or when the service
refuses the request (400, 503...) its problem JSON (type, title, status,
detail), with exit status 1.

Exit status: 0 allowed, 2 denied, 1 on any error (bad flags, service
unreachable, request refused).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v must be positive", timeout)
			}
			if policy == "" {
				return errors.New(`--policy "": want a value (leave the flag out for its default: api)`)
			}
			identity, err := parseIDs(ids)
			if err != nil {
				return err
			}
			if err := clientTLS.refuseUnlessTLS(cmd.Flags(), addr, "https"); err != nil {
				return err
			}
			tc, err := clientTLS.config()
			if err != nil {
				return err
			}
			var hc *http.Client
			if tc != nil {
				tr := http.DefaultTransport.(*http.Transport).Clone()
				tr.TLSClientConfig = tc
				hc = &http.Client{Transport: tr}
			}
			c, err := server.NewClient(addr, hc)
			if err != nil {
				return fmt.Errorf("--addr %q: want the service's URL, such as http://127.0.0.1:8080", addr)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var resp server.CheckResponse
			if peek {
				if cmd.Flags().Changed("cost") {
					return fmt.Errorf("--peek consumes nothing: drop --cost")
				}
				resp, err = c.Peek(ctx, server.PeekRequest{Policy: policy, Identity: identity})
			} else {
				resp, err = c.Check(ctx, server.CheckRequest{Policy: policy, Identity: identity, Cost: &cost})
			}
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			if err != nil {
				// The service's refusal (400, 503...) is an answer too:
				// --json gives it to the script reading stdout.
				var pe *server.ProblemError
				if asJSON && errors.As(err, &pe) {
					if err := enc.Encode(pe.Problem); err != nil {
						return err
					}
				}
				if errors.As(err, &pe) && strings.HasSuffix(pe.Problem.Type, "missing-identity") {
					// The service's hint is the JSON field; here it is a flag.
					return fmt.Errorf("%w; with floodgate check, give each identity value as --id dimension=value (e.g. --id user=42)", err)
				}
				if msg := err.Error(); errors.As(err, &pe) && strings.Contains(msg, servicePeekHint) {
					// The service's hint names its endpoint; here it is a flag.
					return errors.New(strings.Replace(msg, servicePeekHint, "(use --peek to check without consuming)", 1))
				}
				if errors.Is(err, syscall.ECONNREFUSED) {
					// The README's first check, with the service not
					// started or on another port (newuser9).
					return fmt.Errorf("%w; nothing listens at %s: start the service (floodgate serve) or give its URL with --addr", err, addr)
				}
				if noAnswer(err) {
					// As loadtest says it: fasthttp's TLS listener closes
					// a plain HTTP request unanswered (a TLS walk).
					return fmt.Errorf("%w; %s", err, transportHint("--addr", addr, err, tc != nil && len(tc.Certificates) > 0))
				}
				return err
			}
			if asJSON {
				if err := enc.Encode(resp); err != nil {
					return err
				}
			} else {
				printDecision(out, resp, time.Now())
			}
			if !resp.Allowed {
				return &exitError{code: exitDenied}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "http://127.0.0.1:8080", "base URL of the service (https: see --tls-*)")
	clientTLS.add(fl)
	fl.StringVar(&policy, "policy", "api", "policy name")
	fl.StringArrayVar(&ids, "id", nil, "identity value as dimension=value, e.g. user=42 (repeatable)")
	fl.Int64Var(&cost, "cost", 1, "cost of the request")
	fl.BoolVar(&peek, "peek", false, "only report the standing, consuming nothing")
	fl.BoolVar(&asJSON, "json", false, "print the service's JSON response (its problem JSON when it refuses the request)")
	fl.DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	return cmd
}

// parseIDs turns ["user=42", "ip=1.2.3.4"] into a map.
func parseIDs(ids []string) (map[string]string, error) {
	m := make(map[string]string, len(ids))
	for _, kv := range ids {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--id %q: want dimension=value, e.g. user=42", kv)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("--id: dimension %q given twice", k)
		}
		m[k] = v
	}
	return m, nil
}

// printDecision writes a decision for people.
func printDecision(w io.Writer, r server.CheckResponse, now time.Time) {
	verdict := "ALLOWED"
	if !r.Allowed {
		verdict = "DENIED"
	}
	fmt.Fprintf(w, "%s  policy %s, tier %s, decided by layer %q\n", verdict, r.Policy, r.Tier, r.Binding)
	if r.Degraded {
		fmt.Fprintf(w, "DEGRADED: decided by the fallback (mode %s, reason %s): not the shared count; %s\n", r.FailureMode, r.DegradedReason, degradedMeaning(r.FailureMode))
	}
	fmt.Fprintf(w, "  limit %d, remaining %d, resets %s (in %s)\n", r.Limit, r.Remaining, r.ResetAt, until(r.Reset, now))
	if !r.Allowed {
		if r.RetryAfterMS > 0 {
			fmt.Fprintf(w, "  retry after %s (reason: %s)\n", time.Duration(r.RetryAfterMS)*time.Millisecond, r.Reason)
		} else {
			fmt.Fprintf(w, "  reason: %s\n", r.Reason)
		}
	}
	if r.DelayMS > 0 {
		fmt.Fprintf(w, "  wait %s before acting on it (shaping)\n", time.Duration(r.DelayMS)*time.Millisecond)
	}
	for _, l := range r.Layers {
		state := "allowed"
		if !l.Allowed {
			state = "denied (" + l.Reason + ")"
		}
		if l.Shadow {
			state += ", shadow"
		}
		fmt.Fprintf(w, "  - %-16s %-14s %-8s %d/%d left  %s\n", l.Name, l.Algorithm, l.Dimension, l.Remaining, l.Limit, state)
	}
}

// degradedMeaning says what a decision taken by the failure mode named
// mode means for the caller.
func degradedMeaning(mode string) string {
	switch mode {
	case "local":
		return "this instance counted alone, at its local share of the limit"
	case "open":
		return "admitted without counting"
	case "closed":
		return "denied while Redis cannot decide"
	}
	return "Redis did not decide"
}

func until(unix int64, now time.Time) time.Duration {
	return max(time.Unix(unix, 0).Sub(now).Round(time.Second), 0)
}

// noAnswer reports whether err, of a request check sent, says the service
// closed the connection without an answer or the TLS handshake failed
// (not a refused connection, not a timeout).
func noAnswer(err error) bool {
	var (
		alert   tls.AlertError
		rh      tls.RecordHeaderError
		cv      *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
	)
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.As(err, &alert) || errors.As(err, &rh) || errors.As(err, &cv) || errors.As(err, &unknown)
}
