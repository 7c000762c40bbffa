package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/internal/luascript"
	"github.com/floodgate-rl/floodgate/internal/plural"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/floodgate-rl/floodgate/topk"
)

// ResetRequest is the body of POST /admin/v1/reset.
type ResetRequest struct {
	// Policy names the policy whose state to forget.
	Policy string `json:"policy"`
	// Identity holds the identity values, as in a check.
	Identity map[string]string `json:"identity"`
	// Layers limits the reset to these layers. Empty means every layer
	// whose dimensions Identity covers; global layers are reset only when
	// named here.
	Layers []string `json:"layers,omitempty"`
}

// ResetResponse is the body of a successful reset.
type ResetResponse struct {
	// Reset names the layers whose state was forgotten.
	Reset []string `json:"reset"`
	// Keys is how many of those layers' storage keys held state and were
	// deleted, in any store (Redis or the in-process one): 0 when the
	// identity had none, for example reset already. A layer keys one
	// storage key per identity, a global layer one per shard.
	Keys int `json:"keys"`
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	if len(s.opts.Resetters) == 0 {
		s.fail(w, r, &problemError{status: http.StatusNotImplemented, kind: "reset-unsupported", detail: "this server has no way to reset stored state"})
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req ResetRequest
	if err := decodeJSON(body, &req, "policy, identity, layers"); err != nil {
		s.fail(w, r, err)
		return
	}
	cfg := s.cfg.Load()
	keys, layers, err := s.resetKeys(cfg, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var notReplicated bool
	held := make([]bool, len(keys))
	for i, rs := range s.opts.Resetters {
		existed, err := rs.ResetKeys(r.Context(), keys...)
		for j, e := range existed {
			held[j] = held[j] || e
		}
		if errors.Is(err, replicawait.ErrNotReplicated) {
			// Deleted on the primary (every key: a RedisResetter goes
			// on past a key not confirmed), not confirmed by its
			// replicas: the other stores are reset all the same.
			notReplicated = true
			continue
		}
		if err != nil {
			s.log.Error("admin reset failed", "policy", req.Policy, "identity", identityLog(req.Identity), "layers", layers, "targeted", len(keys), "error", err)
			s.fail(w, r, storeUnavailable(resetFailure(err, len(keys), i > 0)))
			return
		}
	}
	deleted := 0
	for _, h := range held {
		if h {
			deleted++
		}
	}
	// targeted is how many storage keys the reset covered, deleted how
	// many of them held state (the answer's keys).
	audit := []any{"policy", req.Policy, "identity", identityLog(req.Identity), "layers", layers, "targeted", len(keys), "deleted", deleted}
	if notReplicated {
		s.log.Info("admin reset", append(audit, "replicated", false)...)
		if deleted == 0 {
			// Nothing deleted now, but the replicas did not confirm
			// the primary's writes so far, which may hold an earlier
			// reset's deletion (this one sent again after its 503):
			// a 200 would say the state is gone for good.
			s.fail(w, r, notReplicatedProblem("the reset deleted nothing: the Redis primary holds no state for these layers (reset already, or never counted), but fewer of its replicas than --redis-wait-replicas confirmed the primary's writes so far in time, and those may include an earlier reset's deletion, which a failover could still undo; send the reset again once the replicas have caught up"))
			return
		}
		s.fail(w, r, notReplicatedProblem(fmt.Sprintf("the reset was applied: %s deleted on the Redis primary, which no longer holds the state of these layers, but fewer of its replicas than --redis-wait-replicas confirmed it in time, so a failover could still bring it back; sending the reset again is harmless", keyCount(deleted))))
		return
	}
	s.log.Info("admin reset", audit...)
	writeJSON(w, http.StatusOK, ResetResponse{Reset: layers, Keys: deleted})
}

// keyCount renders n keys: "1 key", "2 keys".
func keyCount(n int) string {
	if n == 1 {
		return "1 key"
	}
	return strconv.Itoa(n) + " keys"
}

// maybeSent reports whether err, the error of a script call (never sent
// twice), leaves open that the call reached Redis and was applied: all
// but a store-unavailable error that is not indeterminate (a refused
// dial, a pool exhausted, a reply that ran nothing).
func maybeSent(err error) bool {
	return errors.Is(err, floodgate.ErrIndeterminate) || !errors.Is(err, floodgate.ErrStoreUnavailable)
}

// resetFailure says what a reset whose store failed with err did, for
// its 503: keys is how many keys it covers, earlier whether stores before
// the failing one were reset. A *ResetError says how many keys the store
// deleted before the failure and, classified as a script call's error
// (see RedisResetter), whether the failing deletion was sent.
func resetFailure(err error, keys int, earlier bool) string {
	var re *ResetError
	if !errors.As(err, &re) {
		return "resetting (some of the keys may have been deleted; retrying is harmless)"
	}
	sent := maybeSent(err)
	deleted := fmt.Sprintf("%d of the %d keys %s deleted", re.Deleted, keys, plural.Word(re.Deleted, "was", "were"))
	var what string
	switch {
	case re.Deleted == 0 && !sent:
		what = "nothing was deleted"
	case re.Deleted == 0:
		what = "the first key's deletion was sent and may have been applied, no other was sent"
	case !sent:
		what = deleted + ", not the others"
	default:
		what = fmt.Sprintf("%s, and the deletion of key %d was sent and may have been applied", deleted, re.Deleted+1)
	}
	if earlier {
		what += " by the store that failed; the stores before it were reset"
	} else if re.Deleted == 0 && !sent {
		return "resetting (" + what + ")"
	}
	return "resetting (" + what + "; retrying is harmless)"
}

// resetKeys validates a reset request and lists the keys it covers.
func (s *Server) resetKeys(cfg *config.Config, req ResetRequest) (keys, layers []string, err error) {
	if req.Policy == "" {
		return nil, nil, badRequest("missing-policy", "field \"policy\" is required")
	}
	p, ok := cfg.Policy(req.Policy)
	if !ok {
		return nil, nil, badRequest("unknown-policy", "unknown policy %q (configured: %s)", clip.Text(req.Policy, 80), policyNames(cfg))
	}
	if len(req.Identity) > MaxIdentityValues {
		return nil, nil, badRequest("invalid-identity", "identity has %d values (max %d)", len(req.Identity), MaxIdentityValues)
	}
	for dim, v := range req.Identity {
		if err := config.ValidateIdentityValue(dim, v); err != nil {
			return nil, nil, badRequest("invalid-identity", "%s", identityDetail(err))
		}
	}
	named := map[string]bool{}
	for _, n := range req.Layers {
		if _, ok := p.Layer(n); !ok {
			return nil, nil, badRequest("unknown-layer", "policy %q has no layer %q", p.Name, clip.Text(n, 80))
		}
		named[n] = true
	}
	tier := cfg.DefaultTier() // every tier of a layer shares its keys
	for _, l := range p.Layers {
		if len(named) > 0 && !named[l.Name] {
			continue
		}
		var ids []string
		if len(l.Dimensions) == 0 {
			if !named[l.Name] {
				continue
			}
			ids = l.ShardIdentities()
		} else {
			id, err := l.Identity(req.Identity)
			if err != nil {
				if named[l.Name] {
					return nil, nil, badRequest("missing-identity", "%v", err)
				}
				continue
			}
			ids = []string{id}
		}
		for _, id := range ids {
			keys = append(keys, s.lim.Key(l.Policy(tier), id))
		}
		layers = append(layers, l.Name)
	}
	if len(keys) == 0 {
		return nil, nil, badRequest("nothing-to-reset", "no layer of policy %q is keyed by the identity values given (name global layers in \"layers\" to reset them)", p.Name)
	}
	return keys, layers, nil
}

// TierRequest is the body of POST /admin/v1/tier.
type TierRequest struct {
	// Dimension and Value name the identity, e.g. "api_key" and "abc123".
	Dimension string `json:"dimension"`
	Value     string `json:"value"`
	// Tier is the tier to assign, one of the configuration's tiers; ""
	// removes the assignment.
	Tier string `json:"tier"`
}

// tierBody is TierRequest as decoded: a missing or null "tier" is told
// from an empty one, which removes the assignment.
type tierBody struct {
	Dimension string  `json:"dimension"`
	Value     string  `json:"value"`
	Tier      *string `json:"tier"`
}

func (s *Server) handleSetTier(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var in tierBody
	if err := decodeJSON(body, &in, "dimension, value, tier"); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := config.ValidateIdentityValue(in.Dimension, in.Value); err != nil {
		s.fail(w, r, badRequest("invalid-identity", "%s", identityDetail(err)))
		return
	}
	cfg := s.cfg.Load()
	if in.Tier == nil {
		// A body without "tier" (or with null) removed the assignment:
		// a forgotten field must not downgrade an identity.
		s.fail(w, r, badRequest("missing-tier", "field \"tier\" is required: a configured tier (%s), or \"\" to remove the assignment", strings.Join(cfg.Tiers(), ", ")))
		return
	}
	req := TierRequest{Dimension: in.Dimension, Value: in.Value, Tier: *in.Tier}
	if req.Tier != "" && !cfg.HasTier(req.Tier) {
		s.fail(w, r, badRequest("unknown-tier", "unknown tier %q (configured: %s)", clip.Text(req.Tier, 80), strings.Join(cfg.Tiers(), ", ")))
		return
	}
	err = s.assign.SetTier(r.Context(), req.Dimension, req.Value, req.Tier)
	switch {
	case err == nil:
	case errors.Is(err, config.ErrTooManyAssignments):
		s.fail(w, r, &problemError{status: http.StatusServiceUnavailable, kind: "store-unavailable", detail: err.Error()})
		return
	case errors.Is(err, replicawait.ErrNotReplicated):
		// Stored on the primary, not confirmed by its replicas: an
		// administrative change made, and audited as such, though
		// answered 503 (as a quota restore is).
		s.auditTier(cfg, req, "replicated", false)
		s.fail(w, r, notReplicatedProblem("the tier assignment was stored on the Redis primary, but fewer of its replicas than --redis-wait-replicas confirmed it in time, so a failover could still lose it; sending it again is harmless"))
		return
	case errors.Is(err, replicawait.ErrBusy):
		s.log.Error("admin tier assignment failed", "dimension", req.Dimension, "value", clip.Text(req.Value, 200), "tier", req.Tier, "error", err)
		s.fail(w, r, notReplicatedProblem("nothing was stored: the operations already waiting for the Redis replicas to confirm them held every place, or too little time was left to wait for the replicas (--redis-wait-replicas); retry later"))
		return
	default:
		// The write is never sent twice, so its error tells whether it
		// went out: one that did may have been applied.
		what := "storing the tier assignment (it may have been applied; retrying is harmless)"
		if !maybeSent(err) {
			what = "storing the tier assignment (nothing was stored)"
		}
		s.log.Error("admin tier assignment failed", "dimension", req.Dimension, "value", clip.Text(req.Value, 200), "tier", req.Tier, "error", err)
		s.fail(w, r, storeUnavailable(what))
		return
	}
	resp := TierResponse{Dimension: req.Dimension, Value: req.Value, Tier: req.Tier}
	resp.UsedBy, resp.Warning = s.auditTier(cfg, req)
	writeJSON(w, http.StatusOK, resp)
}

// auditTier logs a tier assignment stored, with attrs: at Info, or at
// Warn with the warning of tierUse when nothing of cfg is tiered by its
// dimension (stored all the same: a configuration may come to use it).
func (s *Server) auditTier(cfg *config.Config, req TierRequest, attrs ...any) (usedBy []string, warning string) {
	usedBy, warning = tierUse(cfg, req.Dimension)
	args := append([]any{"dimension", req.Dimension, "value", clip.Text(req.Value, 200), "tier", req.Tier}, attrs...)
	if warning != "" {
		s.log.Warn("admin tier assignment", append(args, "warning", warning)...)
	} else {
		s.log.Info("admin tier assignment", args...)
	}
	return usedBy, warning
}

// TierResponse answers POST /admin/v1/tier: the assignment stored, what
// of the current configuration is tiered by its dimension (UsedBy) and,
// when nothing is, a warning saying so.
type TierResponse struct {
	Dimension string `json:"dimension"`
	Value     string `json:"value"`
	Tier      string `json:"tier"`
	// UsedBy names the policies, quotas and concurrency limits whose
	// limits depend on the tier assigned to Dimension, e.g. "policy api",
	// "quota llm-tokens", "concurrency reports"; empty (never null) when
	// none is.
	UsedBy []string `json:"used_by"`
	// Warning, when UsedBy is empty, says that no decision uses an
	// assignment to Dimension and lists the dimensions that are tiered.
	Warning string `json:"warning,omitempty"`
}

// tierUse lists what of cfg is tiered by dimension, and when nothing is,
// a warning saying so: an assignment to a misspelt dimension (api-key for
// api_key) is stored and used by no decision. A policy naming dimension
// as its tier_dimension without per-tier limits is named in the warning:
// its decisions use the default tier.
func tierUse(cfg *config.Config, dimension string) (usedBy []string, warning string) {
	usedBy = []string{}
	tiered := map[string]bool{}
	var inert []string
	for _, p := range cfg.Policies() {
		switch {
		case p.Tiered():
			tiered[p.TierDimension] = true
			if p.TierDimension == dimension {
				usedBy = append(usedBy, "policy "+p.Name)
			}
		case p.TierDimension == dimension:
			inert = append(inert, strconv.Quote(p.Name))
		}
	}
	for _, q := range cfg.Quotas() {
		if q.Tiered() {
			tiered[q.TierDimension] = true
			if q.TierDimension == dimension {
				usedBy = append(usedBy, "quota "+q.Name)
			}
		}
	}
	for _, l := range cfg.ConcurrencyLimits() {
		if l.Tiered() {
			tiered[l.TierDimension] = true
			if l.TierDimension == dimension {
				usedBy = append(usedBy, "concurrency "+l.Name)
			}
		}
	}
	if len(usedBy) > 0 {
		return usedBy, ""
	}
	dims := make([]string, 0, len(tiered))
	for d := range tiered {
		dims = append(dims, d)
	}
	sort.Strings(dims)
	list := "the dimensions tiered: " + strings.Join(dims, ", ")
	if len(dims) == 0 {
		list = "the configuration tiers nothing"
	}
	warning = fmt.Sprintf("no policy, quota or concurrency limit of the current configuration is tiered by dimension %q, so no decision uses an assignment to it until one is (%s)",
		clip.Text(dimension, 64), list)
	if len(inert) > 0 {
		warning += fmt.Sprintf("; %s %s names it as tier_dimension but has no per-tier limits, so its decisions use the default tier %q",
			plural.Word(len(inert), "policy", "policies"), strings.Join(inert, ", "), cfg.DefaultTier())
	}
	return usedBy, warning
}

// TierInfo is the body of GET /admin/v1/tier: the identity, the tier
// stored for it (Tier, "" when none), read from the store, not from the
// instance's cache, and the tier the decisions tiered by its dimension
// use (Effective): Tier when the configuration defines it, the default
// tier otherwise, and "" when no decision is tiered by that dimension
// (UsedBy empty, Warning saying so), as in TierResponse.
type TierInfo struct {
	Dimension string   `json:"dimension"`
	Value     string   `json:"value"`
	Tier      string   `json:"tier"`
	Effective string   `json:"effective"`
	UsedBy    []string `json:"used_by"`
	Warning   string   `json:"warning,omitempty"`
}

// FreshTiers is implemented by Assignments with a cache in front of
// their store (config.RedisAssignments): FreshTier reads the store.
type FreshTiers interface {
	FreshTier(ctx context.Context, dimension, value string) (string, bool, error)
}

func (s *Server) handleGetTier(w http.ResponseWriter, r *http.Request) {
	var req TierInfo
	var err error
	if req.Dimension, err = queryParam(r.URL.RawQuery, "dimension"); err == nil {
		req.Value, err = queryParam(r.URL.RawQuery, "value")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := config.ValidateIdentityValue(req.Dimension, req.Value); err != nil {
		s.fail(w, r, badRequest("invalid-identity", "%s (pass ?dimension=...&value=...)", identityDetail(err)))
		return
	}
	lookup := s.assign.Tier
	if f, ok := s.assign.(FreshTiers); ok {
		lookup = f.FreshTier
	}
	t, ok, err := lookup(r.Context(), req.Dimension, req.Value)
	if err != nil {
		s.log.Error("admin tier lookup failed", "dimension", req.Dimension, "value", clip.Text(req.Value, 200), "error", err)
		s.fail(w, r, storeUnavailable("reading the tier assignment"))
		return
	}
	cfg := s.cfg.Load()
	req.UsedBy, req.Warning = tierUse(cfg, req.Dimension)
	if len(req.UsedBy) > 0 {
		req.Effective = cfg.DefaultTier()
	}
	if ok {
		req.Tier = t
		if cfg.HasTier(t) && len(req.UsedBy) > 0 {
			req.Effective = t
		}
	}
	writeJSON(w, http.StatusOK, req)
}

func (s *Server) handleTopDenied(w http.ResponseWriter, r *http.Request) {
	n := 10
	v, err := queryParam(r.URL.RawQuery, "n")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 1 || x > topk.MaxCapacity {
			s.fail(w, r, badRequest("invalid-parameter", "n=%q: want a number in 1..%d", clip.Text(v, 20), topk.MaxCapacity))
			return
		}
		n = x
	}
	writeJSON(w, http.StatusOK, TopDenied{Top: s.decided.TopDenied(n)})
}

// TopDenied is the body of GET /admin/v1/top-denied?n=10: the identities
// denied most often since the server started, most denied first. Each key
// is "policy/layer:identity", naming the layer that denied, for a policy,
// "quota:name:identity" for a quota check or reserve, and
// "concurrency:name:identity" for a lease acquire.
type TopDenied struct {
	Top []topk.Item `json:"top"`
}

// ConfigInfo is the body of GET /admin/v1/config.
type ConfigInfo struct {
	Version     string   `json:"version"`
	Source      string   `json:"source"`
	Hash        string   `json:"hash"`
	DefaultTier string   `json:"default_tier"`
	Tiers       []string `json:"tiers"`
	Policies    []string `json:"policies"`
	// Quotas and ConcurrencyLimits name the configuration's quotas and
	// concurrency limits.
	Quotas            []string `json:"quotas,omitempty"`
	ConcurrencyLimits []string `json:"concurrency_limits,omitempty"`
	// Rejected, when set, is the last document of the source refused
	// since this configuration was applied: the source holds something
	// else than what runs (fix it, or push it again).
	Rejected *config.Rejection `json:"rejected,omitempty"`
	// Unreadable, when set, says that the last read of the source failed
	// (a file deleted, a dangling link, the Redis key gone or Redis down)
	// and since when (at): what runs is the last good configuration, and
	// nothing the source holds now can be known.
	Unreadable *config.Rejection `json:"unreadable,omitempty"`
	// NoConfiguration, when set, says that no configuration is loaded
	// yet and why (serve --config-from-redis started while the Redis
	// document could not be used): every decision answers 503
	// no-configuration, and the other fields describe an empty one.
	NoConfiguration string `json:"no_configuration,omitempty"`
}

func (s *Server) handleConfig(w http.ResponseWriter, _ *http.Request) {
	cfg := s.cfg.Load()
	info := ConfigInfo{Version: cfg.Version(), Source: cfg.Source(), Hash: cfg.Hash(), DefaultTier: cfg.DefaultTier(), Tiers: cfg.Tiers(),
		Rejected: s.cfg.LastRejected(), Unreadable: s.cfg.Unreadable()}
	if why := s.cfg.NotLoaded(); why != nil {
		info.NoConfiguration = why.Error()
	}
	for _, p := range cfg.Policies() {
		info.Policies = append(info.Policies, p.Name)
	}
	for _, q := range cfg.Quotas() {
		info.Quotas = append(info.Quotas, q.Name)
	}
	for _, l := range cfg.ConcurrencyLimits() {
		info.ConcurrencyLimits = append(info.ConcurrencyLimits, l.Name)
	}
	writeJSON(w, http.StatusOK, info)
}

// UnlockRequest is the body of POST /admin/v1/login/unlock: the account,
// the client address, or both, whose login lockout to lift.
type UnlockRequest struct {
	Account string `json:"account,omitempty"`
	IP      string `json:"ip,omitempty"`
}

func (s *Server) handleLoginUnlock(w http.ResponseWriter, r *http.Request) {
	if s.opts.LoginGuard == nil {
		s.fail(w, r, &problemError{status: http.StatusNotImplemented, kind: "login-guard-disabled",
			detail: "this server has no login guard (serve with --redis and --login-secret-file)"})
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req UnlockRequest
	if err := decodeJSON(body, &req, "account, ip"); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Account == "" && req.IP == "" {
		s.fail(w, r, badRequest("invalid-unlock", "give \"account\", \"ip\" or both"))
		return
	}
	var ip netip.Addr
	if req.IP != "" {
		if ip, err = netip.ParseAddr(req.IP); err != nil {
			s.fail(w, r, badRequest("invalid-unlock", "ip %q is not an IP address", clip.Text(req.IP, 80)))
			return
		}
	}
	if len(req.Account) > MaxUnlockAccountLen {
		s.fail(w, r, badRequest("invalid-unlock", "account is %d bytes (max %d)", len(req.Account), MaxUnlockAccountLen))
		return
	}
	lifted, err := s.opts.LoginGuard.Lift(r.Context(), req.Account, ip)
	if errors.Is(err, replicawait.ErrNotReplicated) {
		// Lifted on the primary, not confirmed by its replicas.
		s.log.Info("admin login unlock", "account_given", req.Account != "", "ip_given", req.IP != "",
			"cleared_account", lifted.Account, "cleared_ip", lifted.IP, "cleared_pair", lifted.Pair, "replicated", false)
		s.fail(w, r, notReplicatedProblem("the unlock was applied: the Redis primary no longer holds the lockout, but fewer of its replicas than --redis-wait-replicas confirmed it in time, so a failover could still bring it back; sending the unlock again is harmless"))
		return
	}
	if err != nil {
		if errors.Is(err, loginguard.ErrInvalidAccount) || errors.Is(err, loginguard.ErrInvalidIP) {
			s.fail(w, r, badRequest("invalid-unlock", "%v", err))
			return
		}
		// One atomic step: all of it was lifted or none, and when the
		// script was sent but its answer lost, which is not known.
		what := "unlocking (nothing was lifted)"
		if errors.Is(err, floodgate.ErrIndeterminate) {
			what = "unlocking (the unlock was sent and may have been applied; retrying is harmless)"
		}
		s.log.Error("admin login unlock failed", "account_given", req.Account != "", "ip_given", req.IP != "", "error", err)
		s.fail(w, r, storeUnavailable(what))
		return
	}
	resp := UnlockResponse{Unlocked: lifted.Any(), Cleared: UnlockCleared{Account: lifted.Account, IP: lifted.IP, Pair: lifted.Pair}}
	if !resp.Unlocked {
		resp.Detail = "no failures or lock on record for this " + unlockSubject(req) + " under --login-prefix " + strconv.Quote(s.opts.LoginPrefix) +
			": nothing to lift; if the application's guard refuses it, check that serve has the application's secret (--login-secret-file, read trimmed of surrounding space), key prefix and network sizes (--login-ipv4-prefix, --login-ipv6-prefix)"
	}
	s.log.Info("admin login unlock", "account_given", req.Account != "", "ip_given", req.IP != "",
		"cleared_account", lifted.Account, "cleared_ip", lifted.IP, "cleared_pair", lifted.Pair)
	writeJSON(w, http.StatusOK, resp)
}

// UnlockResponse answers POST /admin/v1/login/unlock: Unlocked is whether
// any state was found and forgotten, Cleared which.
type UnlockResponse struct {
	Unlocked bool          `json:"unlocked"`
	Cleared  UnlockCleared `json:"cleared"`
	// Detail, when nothing was found, says why that can be.
	Detail string `json:"detail,omitempty"`
}

// UnlockCleared lists the states an unlock forgot: the account's, the
// address's, and the account's from that address (given both).
type UnlockCleared struct {
	Account bool `json:"account"`
	IP      bool `json:"ip"`
	Pair    bool `json:"pair"`
}

// unlockSubject names what an unlock request gave.
func unlockSubject(req UnlockRequest) string {
	switch {
	case req.Account != "" && req.IP != "":
		return "account or address"
	case req.Account != "":
		return "account"
	}
	return "address"
}

// RestoreRequest is the body of POST /admin/v1/quota/restore: set an
// identity's usage of a quota in the current period, for example from
// billing records after its state was lost (problem quota-state-lost).
type RestoreRequest struct {
	// Quota and Identity name the usage, as in a quota check.
	Quota    string            `json:"quota"`
	Identity map[string]string `json:"identity"`
	// Used is the usage to set, 0..quota.MaxUsed (required).
	Used *int64 `json:"used"`
	// Period names the period to set: "" or the current period's key
	// for the current one, the previous period's key for that one (a
	// settle answered quota-state-lost naming it); any other is a 400.
	Period string `json:"period,omitempty"`
}

func (s *Server) handleQuotaRestore(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req RestoreRequest
	if err := decodeJSON(body, &req, "quota, identity, used, period", restoreUsed); err != nil {
		s.fail(w, r, err)
		return
	}
	cfg := s.cfg.Load()
	op, err := decodeQuota(cfg, req.Quota, req.Identity)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Used == nil {
		s.fail(w, r, badRequest("missing-cost", "field \"used\" is required: the usage to set for the current period"))
		return
	}
	if err := restoreUsed.check("", *req.Used); err != nil {
		s.fail(w, r, err)
		return
	}
	eng, err := s.enginesFor(cfg)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Every tier of a quota shares its usage; the tier only sets the
	// limit the response reports.
	ctx, cancel := s.decisionContext(r.Context())
	defer cancel()
	tier := s.operationTier(ctx, cfg, op.quota.Name, op.quota.Tiered(), op.quota.TierDimension, op.values)
	var res quota.Result
	err = s.guard(ctx, op.identity, func(ctx context.Context) (bool, error) {
		var err error
		res, err = eng.quota(op.quota.Name, tier).RestorePeriod(ctx, op.identity, req.Period, *req.Used)
		return err == nil, err // the usage's HSET
	})
	// The usage replaced was read in the restore's own atomic step; a
	// lost one is unknown, and said so rather than logged as 0.
	var previous any = res.Replaced
	if res.ReplacedLost {
		previous = "unknown (the usage was lost)"
	}
	switch {
	case errors.Is(err, replicawait.ErrNotReplicated):
		// Applied on the primary (its reply came with the error), not
		// confirmed by its replicas: an administrative change made, and
		// audited as such, though answered 503.
		s.log.Info("admin quota restore", "quota", op.quota.Name, "identity", identityLog(req.Identity), "period", res.Period.Key,
			"used", *req.Used, "previous_used", previous, "replicated", false)
	case errors.Is(err, floodgate.ErrIndeterminate):
		// Sent, its answer lost: the usage may have been set.
		s.log.Error("admin quota restore failed; the usage may have been set", "quota", op.quota.Name, "identity", identityLog(req.Identity), "period", req.Period,
			"used", *req.Used, "error", err)
	}
	if err != nil {
		p := s.operationProblem(r.Context(), opQuotaRestore, err)
		var sf *storeFailure
		if errors.As(p, &sf) && !errors.Is(err, replicawait.ErrNotReplicated) && !errors.Is(err, floodgate.ErrIndeterminate) {
			// Not applied (the two cases above are logged there): the
			// store's error, as a failed reset or tier assignment logs it.
			s.log.Error("admin quota restore failed", "quota", op.quota.Name, "identity", identityLog(req.Identity), "period", req.Period,
				"used", *req.Used, "error", err)
		}
		s.fail(w, r, p)
		return
	}
	s.log.Info("admin quota restore", "quota", op.quota.Name, "identity", identityLog(req.Identity), "period", res.Period.Key,
		"used", *req.Used, "previous_used", previous)
	writeJSON(w, http.StatusOK, quotaResponse(op, tier, res))
}

// storeUnavailable is the problem of an admin call whose store operation
// failed: what it was doing, never the store's error (addresses, keys,
// server messages), which the handler logs, as the API's problems do.
func storeUnavailable(what string) *problemError {
	return &problemError{status: http.StatusServiceUnavailable, kind: "store-unavailable",
		detail: what + ": the store failed or did not answer; the service log has the error"}
}

// notReplicatedProblem is the 503 store-not-replicated of an admin write
// that --redis-wait-replicas did not see confirmed: detail says whether
// it was applied.
func notReplicatedProblem(detail string) *problemError {
	return &problemError{status: http.StatusServiceUnavailable, kind: "store-not-replicated", detail: detail, retry: true}
}

// identityLog renders identity values for an admin audit line, each value
// clipped: "dimension=value" pairs in dimension order.
func identityLog(id map[string]string) string {
	dims := make([]string, 0, len(id))
	for d := range id {
		dims = append(dims, d)
	}
	sort.Strings(dims)
	var b strings.Builder
	for i, d := range dims {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(clip.Text(d, 64) + "=" + clip.Text(id[d], 200))
	}
	return b.String()
}

// MaxUnlockAccountLen is the longest account name an unlock accepts.
const MaxUnlockAccountLen = 1024

// MemoryResetter resets keys of an in-process memstore.Store.
type MemoryResetter struct {
	// Store is the store to reset.
	Store *memstore.Store
}

// ResetKeys implements Resetter: a key existed when the store held its
// state unexpired.
func (m MemoryResetter) ResetKeys(_ context.Context, keys ...string) ([]bool, error) {
	existed := make([]bool, len(keys))
	for i, k := range keys {
		existed[i] = m.Store.Reset(k)
	}
	return existed, nil
}

// ResetError is the error of a Resetter that failed part-way: the first
// Deleted keys were deleted, and Err is the error of the next one.
type ResetError struct {
	// Deleted is how many keys, in the order given, were deleted before
	// the failure.
	Deleted int
	// Err is the failure.
	Err error
}

func (e *ResetError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ResetError) Unwrap() error { return e.Err }

// RedisResetter resets keys stored in Redis by deleting them, one DEL per
// key (each in a script call, which go-redis never sends twice) so that
// keys in different Redis Cluster slots are fine. Its error is a
// *ResetError saying how many keys were deleted before the failure, and
// wraps floodgate.ErrStoreUnavailable when the failing deletion was
// certainly not applied (Redis refused the connection, say) or
// floodgate.ErrIndeterminate when it may have been.
type RedisResetter struct {
	// Client is the Redis client the store uses.
	Client redis.UniversalClient
	// Writer, if set, sends each DEL (as a script call, which a
	// replicawait.Client can route on a Redis Cluster) in place of
	// Client: a *replicawait.Client, so that a reset is answered only
	// once enough replicas have it (serve's --redis-wait-replicas). A key
	// deleted on the primary but not confirmed does not stop the others:
	// every key is deleted, and ResetKeys's error then wraps
	// replicawait.ErrNotReplicated.
	Writer interface {
		Process(ctx context.Context, cmd redis.Cmder) error
	}
}

// ResetKeys implements Resetter: a key existed when its DEL deleted it
// (replied 1).
func (rr RedisResetter) ResetKeys(ctx context.Context, keys ...string) ([]bool, error) {
	var c luascript.Client = rr.Client
	if rr.Writer != nil {
		c = rr.Writer
	}
	existed := make([]bool, len(keys))
	var notReplicated error
	for i, k := range keys {
		v, err := delScript.Run(ctx, c, []string{k})
		switch {
		case errors.Is(err, replicawait.ErrNotReplicated):
			if notReplicated == nil {
				notReplicated = fmt.Errorf("server: deleting %q: %w", k, err)
			}
		case err != nil:
			return existed[:i], &ResetError{Deleted: i, Err: fmt.Errorf("server: deleting %q (key %d of %d): %w", k, i+1, len(keys), err)}
		}
		// DEL of one key replies 0 or 1; with ErrNotReplicated the
		// primary's reply comes with the error.
		n, _ := v.(int64)
		existed[i] = n == 1
	}
	return existed, notReplicated
}

// delScript deletes KEYS[1].
var delScript = luascript.New(`return redis.call('DEL', KEYS[1])`, luascript.Options{})
