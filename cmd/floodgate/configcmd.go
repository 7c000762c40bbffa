package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/internal/plural"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Validate or publish configuration, or print the built-in example",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newConfigValidateCmd(), newConfigPushCmd(), newConfigExampleCmd())
	return cmd
}

func newConfigValidateCmd() *cobra.Command {
	var envoy bool
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check configuration files; print every problem with file:line:column",
		Long: `Check configuration files without starting anything. Every problem is
printed as file:line:column: what is wrong. Exit status 1 if any file is
invalid.

A file is read as floodgate's policies (--config) unless it is an Envoy
descriptor file (envoyproxy/ratelimit's format, serve --envoy-config): one
with a top-level domain and no top-level policies, or any file with
--envoy. A directory is read as serve --envoy-config reads one: its .yaml
and .yml files, as Envoy descriptor files; its other entries that
envoyproxy/ratelimit and envoy-compat would read but serve skips
(subdirectories, files of other names; not dot files) are warned of. Envoy descriptor files given
together are also checked as one set (no domain twice), as serve reads a
directory of them. A FILE of - is standard input (named <stdin> in the
messages; ./- for a file named -).

A policies file without a version field is valid (serve --config does not
need one), but config push would refuse it: validate warns of it.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, fromDir, err := expandConfigArgs(args, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			in := &configInput{stdin: cmd.InOrStdin()}
			failed := 0
			var envoyFiles []string
			var envoyCfgs []*envoyrls.Config
			for _, file := range files {
				if envoy || fromDir[file] || in.isEnvoy(file) {
					c, err := in.validateEnvoy(file, !envoy && !fromDir[file])
					if err != nil {
						failed++
						for _, e := range flatten(located(err)) {
							fmt.Fprintln(cmd.ErrOrStderr(), e)
						}
						continue
					}
					envoyFiles, envoyCfgs = append(envoyFiles, inputName(file)), append(envoyCfgs, c)
					fmt.Fprintf(cmd.OutOrStdout(), "%s: OK (Envoy descriptors, domain %q, %s)\n",
						inputName(file), strings.Join(c.Domains(), ", "), plural.Count(len(c.Rules()), "rule", "rules"))
					continue
				}
				cfg, err := in.load(file)
				if err != nil {
					failed++
					for _, e := range flatten(err) {
						fmt.Fprintln(cmd.ErrOrStderr(), e)
					}
					continue
				}
				tiers := "tier " + cfg.DefaultTier()
				if len(cfg.Tiers()) > 1 {
					tiers = "tiers " + strings.Join(cfg.Tiers(), ", ") + ", default " + cfg.DefaultTier()
				}
				name := inputName(file)
				fmt.Fprintf(cmd.OutOrStdout(), "%s: OK (version %q, %s, %s, %s, %s)\n",
					name, cfg.Version(), plural.Count(len(cfg.Policies()), "policy", "policies"), plural.Count(len(cfg.Quotas()), "quota", "quotas"),
					plural.Count(len(cfg.ConcurrencyLimits()), "concurrency limit", "concurrency limits"), tiers)
				if cfg.Version() == "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: warning: %s\n", name, noVersionWarning)
				}
				if w := in.signedSizeWarning(file); w != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), w)
				}
				for _, w := range cfg.Warnings() {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: warning: %s\n", name, w)
				}
			}
			merged := true
			if len(envoyCfgs) > 1 {
				if _, err := envoyrls.MergeConfigs(envoyCfgs...); err != nil {
					merged = false
					fmt.Fprintf(cmd.ErrOrStderr(), "%s together: %v\n", strings.Join(envoyFiles, ", "), located(err))
				}
			}
			switch {
			case failed > 0 && !merged:
				return &exitError{code: 1, err: fmt.Errorf("%d of %d files invalid, and the valid Envoy descriptor files do not go together", failed, len(files))}
			case failed > 0:
				return &exitError{code: 1, err: fmt.Errorf("%d of %d files invalid", failed, len(files))}
			case !merged:
				return &exitError{code: 1, err: fmt.Errorf("each file is valid, but the %d Envoy descriptor files do not go together (serve --envoy-config would refuse them)", len(envoyFiles))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&envoy, "envoy", false, "read every file as an Envoy descriptor file (envoyproxy/ratelimit's format, serve --envoy-config)")
	return cmd
}

// expandConfigArgs returns validate's files: each argument that is a file
// (or cannot be read: LoadFile says why), and the descriptor files of
// each directory, as serve --envoy-config lists them; fromDir marks the
// latter, which are Envoy descriptor files whatever they hold. It warns
// on warn of each directory's entries serve skips but
// envoyproxy/ratelimit's loader reads.
func expandConfigArgs(args []string, warn io.Writer) (files []string, fromDir map[string]bool, err error) {
	fromDir = map[string]bool{}
	for _, a := range args {
		if fi, err := os.Stat(a); err != nil || !fi.IsDir() {
			files = append(files, a)
			continue
		}
		inDir, skipped, err := config.EnvoyFiles([]string{a})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", a, err)
		}
		if len(skipped) > 0 {
			fmt.Fprintf(warn, "%s: warning: %s: %s\n", a, strings.Join(skipped, ", "), config.EnvoySkipped)
		}
		for _, f := range inDir {
			files = append(files, f)
			fromDir[f] = true
		}
	}
	return files, fromDir, nil
}

// envoyTopLevel finds the top-level keys that tell an Envoy descriptor file
// (domain) from a policies file (policies).
var (
	envoyDomainRE   = regexp.MustCompile(`(?m)^domain[ \t]*:`)
	policiesFieldRE = regexp.MustCompile(`(?m)^policies[ \t]*:`)
)

// noVersionWarning is validate's warning for a policies file without a
// version field, which serve --config runs but config push refuses.
const noVersionWarning = "no version field: config push would refuse it (a shared configuration needs a version field); " +
	"instances name the configuration they run by its version (logs, /readyz, /admin/v1/config, doctor's Instances/config-version), " +
	"and tell a new configuration from an old one by it (a lower version than the one running is logged and counted in floodgate_config_version_regressions_total)"

// stdinName names standard input, given as the file "-", in messages.
const stdinName = "<stdin>"

// inputName is the name file is reported under.
func inputName(file string) string {
	if file == "-" {
		return stdinName
	}
	return file
}

// configInput reads the files config validate and push are given, and
// standard input for the file "-", each once however often it is asked
// for: a pipe (<(command), /dev/stdin, -) holds nothing for a second
// read. Unlike serve, which refuses them, it reads pipes and devices: it
// reads each file once, from start to end or the size limit.
type configInput struct {
	stdin io.Reader
	files map[string]*inputFile
}

// inputFile is one file as read: its first envoyrls.MaxConfigSize+1 bytes
// (the larger size limit, and one byte past it), its size when it is a
// regular file (else -1), or why it could not be read.
type inputFile struct {
	data []byte
	size int64
	err  error
}

// get reads file (standard input for "-") the first time it is asked for,
// and returns what that read found every time.
func (in *configInput) get(file string) *inputFile {
	if f, ok := in.files[file]; ok {
		return f
	}
	f := &inputFile{size: -1}
	if file == "-" {
		f.data, f.err = io.ReadAll(io.LimitReader(in.stdin, envoyrls.MaxConfigSize+1))
		if f.err != nil {
			f.err = fmt.Errorf("reading standard input: %w", f.err)
		}
	} else {
		f.data, f.size, f.err = readInput(file)
	}
	if in.files == nil {
		in.files = map[string]*inputFile{}
	}
	in.files[file] = f
	return f
}

// readInput reads file's first envoyrls.MaxConfigSize+1 bytes, and
// returns its size when it is a regular file, else -1.
func readInput(file string) ([]byte, int64, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, -1, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, envoyrls.MaxConfigSize+1))
	if err != nil {
		return nil, -1, err
	}
	size := int64(-1)
	if fi, err := fh.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return data, size, nil
}

// read returns file's content (standard input for "-") within the size
// limit of an Envoy descriptor file (envoy) or of a policies file; a
// larger file is an *envoyrls.ConfigError or a *config.Error naming it,
// with its size when it is a regular file.
func (in *configInput) read(file string, envoy bool) ([]byte, error) {
	f := in.get(file)
	if f.err != nil {
		return nil, f.err
	}
	limit, what := config.MaxSize, "a policies file"
	if envoy {
		limit, what = envoyrls.MaxConfigSize, "an Envoy descriptor file"
	}
	if len(f.data) <= limit {
		return f.data, nil
	}
	msg := fmt.Sprintf("file is larger than %d bytes (max for %s)", limit, what)
	if f.size > int64(limit) {
		msg = fmt.Sprintf("file is %d bytes (max %d for %s)", f.size, limit, what)
	}
	if envoy {
		return nil, &envoyrls.ConfigError{File: inputName(file), Msg: msg}
	}
	return nil, &config.Error{File: inputName(file), Msg: msg}
}

// head returns the first envoyrls.MaxConfigSize bytes of file (standard
// input for "-"), however large it is.
func (in *configInput) head(file string) ([]byte, error) {
	f := in.get(file)
	if f.err != nil {
		return nil, f.err
	}
	return f.data[:min(len(f.data), envoyrls.MaxConfigSize)], nil
}

// isEnvoy reports a file with a top-level domain and no top-level
// policies in its first envoyrls.MaxConfigSize bytes (a larger file is
// then refused as a too large Envoy descriptor file, not as a too large
// policies file); an unreadable file is not (load says why).
func (in *configInput) isEnvoy(file string) bool {
	data, err := in.head(file)
	if err != nil {
		return false
	}
	return envoyDomainRE.Match(data) && !policiesFieldRE.Match(data)
}

// validateEnvoy reads and parses one Envoy descriptor file as serve
// --envoy-config does. detected says it is read as one for what it holds
// (not --envoy, not a directory's): a size error then says so.
func (in *configInput) validateEnvoy(file string, detected bool) (*envoyrls.Config, error) {
	data, err := in.read(file, true)
	if err != nil {
		var ce *envoyrls.ConfigError
		if errors.As(err, &ce) {
			if detected {
				c := *ce
				c.Msg += "; it is read as one: it has a top-level domain and no top-level policies"
				return nil, &c
			}
			return nil, err // too large: it names the file already
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	return envoyrls.ParseConfig(data, inputName(file))
}

// located rewrites the *envoyrls.ConfigErrors in err (one, or several
// joined) to read as policies' errors do, "file:line:column: message",
// without the "envoyrls: invalid configuration" prefix; they still match
// envoyrls.ErrInvalidConfig.
func located(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = located(e)
		}
		return errors.Join(out...)
	}
	var ce *envoyrls.ConfigError
	if errors.As(err, &ce) {
		return locatedError{ce}
	}
	return err
}

// locatedError is a *envoyrls.ConfigError printed by its Located form.
type locatedError struct{ ce *envoyrls.ConfigError }

func (e locatedError) Error() string { return e.ce.Located() }
func (e locatedError) Unwrap() error { return e.ce }

// load reads and parses one policies file, as config.LoadFile does.
func (in *configInput) load(file string) (*config.Config, error) {
	data, err := in.read(file, false)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return nil, err // too large: it names the file already
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	return config.Parse(data, inputName(file))
}

// flatten lists the errors joined in err, one per line.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func newConfigPushCmd() *cobra.Command {
	var (
		rs          config.Redis
		prefix      string
		force       bool
		sign        string
		listDropped bool
		sec         securityFlags
		waitN       int
		waitTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "push FILE",
		Short: "Validate a configuration and publish it to Redis for every instance",
		Long: `Validate FILE and, only if it is valid and has a version field, store it
in Redis under <prefix>:config and announce it on <prefix>:config:changed.
Every "floodgate serve --config-from-redis" instance applies it within a
moment. Bump the version with every change: a version already published
with other content is refused (instances would otherwise run two documents
under one version), and so is a version lower than the published one
(natural order: "9" < "10") unless --force (a rollback). A stored
document of the same version that differs from FILE only in spacing or
line ends (as redis-cli set KEY "$(cat FILE)" leaves it) or only in its
signature line, which instances running that version refuse, is
replaced, and push says so. Over a signed
document, a push unsigned or signed with another key is refused unless
--force (instances verifying with the old key would refuse it). With no
document stored there is nothing to compare with: push warns of it.
Pushing the published document again only announces it. A FILE of - is
standard input (named <stdin> in the messages).

Before it announces the document and prints "published", push confirms
that a failover cannot lose it: the replicas of the primary that stored
it must acknowledge it (Redis WAIT: by default every replica the primary
lists online, and behind Sentinel at least one when the sentinels list a
replica they do not see down; --wait-replicas), and behind Sentinel a
majority of the sentinels must still name that server the primary. A
push made while a failover is under way (in the seconds after SENTINEL
FAILOVER, the old primary takes writes that the promoted replica never
gets) fails that check: push then exits with status 1 and says the
version is stored on the primary but not confirmed durable. It does not
announce it, but the document is stored: instances polling Redis may still
apply it at their next poll (every 10 s by default), until a failover
loses it. Run the push again to confirm it (once the failover is over
it goes through, or only announces the document if the new primary has
it). When the primary lists fewer replicas online than --wait-replicas,
pushing again fails the same way: push says so; lower --wait-replicas
(0: do not wait) or bring the replicas back. A --redis address that is
a replica is refused before anything is written: give the primary, or
the sentinels with --redis-sentinel.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := config.KeysFor(prefix)
			if err != nil {
				return fmt.Errorf("--prefix: %w", err)
			}
			in := &configInput{stdin: cmd.InOrStdin()}
			data, err := in.read(args[0], false)
			if err != nil {
				return err
			}
			// Validate before connecting, so that every problem is
			// reported against the file, by its name and line.
			name := inputName(args[0])
			checked, err := config.Parse(data, name)
			if err == nil && checked.Version() == "" {
				err = &config.Error{File: name, Msg: "a shared configuration needs a version field"}
			}
			if err != nil {
				for _, e := range flatten(err) {
					fmt.Fprintln(cmd.ErrOrStderr(), e)
				}
				return &exitError{code: 1}
			}
			if !rs.Enabled() {
				return errors.New("push needs --redis (or --redis-sentinel with --redis-master, or --redis-cluster)")
			}
			if waitN < config.ReplicasOnline || waitN > 16 {
				return fmt.Errorf("--wait-replicas %d: out of range -1..16 (-1: every replica the primary lists online; 0: do not wait)", waitN)
			}
			switch {
			case waitTimeout > 0 && waitTimeout < time.Millisecond:
				// go-redis would send it as WAIT n 0, which waits for ever.
				return fmt.Errorf("--wait-timeout %v: below 1ms, the unit of Redis WAIT's timeout (and WAIT with 0 waits for ever); want 0 (the default, %v) or 1ms up to 5s", waitTimeout, config.DefaultReplicaTimeout)
			case waitTimeout < 0 || waitTimeout > 5*time.Second:
				return fmt.Errorf("--wait-timeout %v: want 0 (the default, %v) or 1ms up to 5s", waitTimeout, config.DefaultReplicaTimeout)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			if err := sec.redisClientSettings(&rs, log); err != nil {
				return err
			}
			// go-redis's own lines (a failed dial per retry) are
			// dropped, as doctor drops them: the error the push ends with
			// says what failed, and an outside walk saw a WARN line
			// printed before it.
			redis.SetLogger(newRedisLogger(slog.New(slog.DiscardHandler), time.Minute))
			client, err := rs.Client()
			if err != nil {
				return err
			}
			defer client.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			var key []byte
			if sign != "" {
				raw, err := os.ReadFile(sign)
				if err != nil {
					return fmt.Errorf("--sign-key-file: %w", err)
				}
				key = []byte(strings.TrimSpace(string(raw)))
				if len(key) < config.MinSignKeyLen {
					return fmt.Errorf("--sign-key-file %s: a key of %d bytes, want at least %d", sign, len(key), config.MinSignKeyLen)
				}
			}
			// What the push replaces, to warn of names it drops (read
			// apart from the push: a warning, not a check).
			prev, prevErr := config.LoadRedis(ctx, client, keys)
			po := config.PublishOptions{Force: force, SignKey: key, Replicas: waitN, ReplicaTimeout: waitTimeout}
			if st, ok, err := rs.Sentinels(); err != nil {
				return err
			} else if ok {
				po.Sentinels = &st
			}
			cfg, err := config.PublishWith(ctx, client, keys, data, po)
			if err != nil {
				for _, e := range flatten(err) {
					fmt.Fprintln(cmd.ErrOrStderr(), e)
				}
				return &exitError{code: 1}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published version %q (%s) to %s, key %s\n", cfg.Version(), plural.Count(len(cfg.Policies()), "policy", "policies"), rs, keys.Config)
			if prev != nil && prev.Version() == cfg.Version() {
				switch cfg.DifferenceFrom(prev) {
				case config.SpacingOnly:
					fmt.Fprintf(cmd.OutOrStdout(), "replaced the stored document of version %q, which differed only in spacing or line ends\n", cfg.Version())
				case config.SignatureOnly:
					fmt.Fprintf(cmd.OutOrStdout(), "replaced the stored document of version %q, which had the same content under another signature line: instances that run it keep it, refusing this one (bump the version to change them)\n", cfg.Version())
				}
			}
			if force && prev != nil && config.CompareVersions(cfg.Version(), prev.Version()) < 0 {
				// --force is also what a key rotation takes: say the
				// rollback it let through.
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: --force published version %q below the stored %q: instances roll back to it\n", cfg.Version(), prev.Version())
			}
			if errors.Is(prevErr, config.ErrNotFound) {
				// Nothing to compare with: after Redis lost the key
				// (wiped, or restored from a snapshot older than the
				// first push), a lower version than the fleet runs
				// goes through without --force.
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: no configuration was stored under %s: published version %q without comparing it to another; instances running a newer one go back to this one (they log it at WARN and count it in floodgate_config_version_regressions_total)\n", keys.Config, cfg.Version())
			}
			for _, w := range droppedNames(prev, cfg, listDropped) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&rs.URL, "redis", "", "Redis URL (see floodgate serve --help)")
	fl.StringSliceVar(&rs.SentinelAddrs, "redis-sentinel", nil, "Redis Sentinel addresses")
	fl.StringVar(&rs.SentinelMaster, "redis-master", "", "name of the primary the sentinels monitor")
	fl.StringSliceVar(&rs.ClusterAddrs, "redis-cluster", nil, "Redis Cluster seed addresses")
	fl.StringVar(&prefix, "prefix", "fg", "key prefix the service runs with")
	fl.StringVar(&sign, "sign-key-file", "", "sign the document with the HMAC-SHA256 key in this file (at least 32 bytes), for instances started with --config-verify-key-file")
	addRedisSecurityFlags(fl, &sec)
	fl.BoolVar(&listDropped, "list-dropped", false, fmt.Sprintf("warn of every policy, quota and concurrency limit the push drops by name (default: of up to %d of each kind, then of their number with the first names)", maxDroppedListed))
	fl.IntVar(&waitN, "wait-replicas", config.ReplicasOnline, "replicas of the primary that must acknowledge the document before it is announced (Redis WAIT); -1: every replica the primary lists online, and behind Sentinel at least 1 when the sentinels list one they do not see down; 0: do not wait. Not acknowledged within --wait-timeout, the push fails (exit status 1) unannounced, the document stored on the primary, where instances polling may still apply it: run it again to confirm it")
	fl.DurationVar(&waitTimeout, "wait-timeout", config.DefaultReplicaTimeout, "how long to wait for --wait-replicas (0: the default; 1ms up to 5s, in whole milliseconds as Redis WAIT counts)")
	fl.BoolVar(&force, "force", false, "publish a version lower than the published one (a rollback), replace an invalid stored document with a lower version than it declares, or one declaring none or over 1 MiB, or replace a signed document with an unsigned one or one signed with another key (a key rotation)")
	return cmd
}

func newConfigExampleCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "example",
		Short: "Print the built-in example configuration (what serve uses without --config)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(config.DefaultYAML())
			return err
		},
	}
}

// signedSizeWarning returns a warning when file, valid, would be over
// config.MaxSize once config push --sign-key-file adds its signature
// line, or "" when it would not (or cannot be read: validate has just
// read it).
func (in *configInput) signedSizeWarning(file string) string {
	data, err := in.read(file, false)
	if err != nil {
		return ""
	}
	n := config.SignedLen(data)
	if n <= config.MaxSize {
		return ""
	}
	return fmt.Sprintf("%s: warning: signed (config push --sign-key-file), it would be %d bytes, over the %d-byte limit: the signature line adds %d bytes; push would refuse it signed",
		inputName(file), n, config.MaxSize, n-len(data))
}

// maxDroppedListed is the most names of one kind config push warns of
// one by one; past it, it warns once of their number and the first ones.
const maxDroppedListed = 5

// droppedNames lists the policies, quotas and concurrency limits that prev
// defines and next does not, each with what its callers now get: one line
// per name up to maxDroppedListed of a kind (or all, with all), else one
// line for the kind; nil when prev is nil.
func droppedNames(prev, next *config.Config, all bool) []string {
	if prev == nil {
		return nil
	}
	var out []string
	drop := func(kind, kinds, problem string, old, cur []string) {
		have := map[string]bool{}
		for _, n := range cur {
			have[n] = true
		}
		var gone []string
		for _, n := range old {
			if !have[n] {
				gone = append(gone, n)
			}
		}
		if all || len(gone) <= maxDroppedListed {
			for _, n := range gone {
				out = append(out, fmt.Sprintf("version %q drops %s %q, which version %q defined: requests naming it get 400 %s", next.Version(), kind, n, prev.Version(), problem))
			}
			return
		}
		quoted := make([]string, maxDroppedListed)
		for i, n := range gone[:maxDroppedListed] {
			quoted[i] = strconv.Quote(n)
		}
		out = append(out, fmt.Sprintf("version %q drops %d %s which version %q defined (%s, … %d more; --list-dropped names them all): requests naming them get 400 %s",
			next.Version(), len(gone), kinds, prev.Version(), strings.Join(quoted, ", "), len(gone)-maxDroppedListed, problem))
	}
	names := func(c *config.Config) (p, q, l []string) {
		for _, x := range c.Policies() {
			p = append(p, x.Name)
		}
		for _, x := range c.Quotas() {
			q = append(q, x.Name)
		}
		for _, x := range c.ConcurrencyLimits() {
			l = append(l, x.Name)
		}
		return p, q, l
	}
	op, oq, ol := names(prev)
	np, nq, nl := names(next)
	drop("policy", "policies", "unknown-policy", op, np)
	drop("quota", "quotas", "unknown-quota", oq, nq)
	drop("concurrency limit", "concurrency limits", "unknown-limiter", ol, nl)
	return out
}
