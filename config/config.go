// Package config holds Floodgate's service configuration: policies made of
// ordered layers, and tiers (free, pro, enterprise...) that override the
// layers' limits. A configuration is parsed from YAML ([Parse]), validated
// completely, and then never changes: live reload ([Reloader]) swaps whole
// configurations atomically, so a decision never sees half of one.
//
// The package also holds where configuration lives at run time: a watched
// file or a Redis key with a pub/sub notification ([Reloader.WatchFile],
// [Reloader.WatchRedis]), per-key tier assignments ([MemoryAssignments],
// [RedisAssignments]) and the Redis connection settings ([Redis]).
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/clip"
)

// Errors returned by this package wrap one of these with %w.
var (
	// ErrInvalid reports a configuration that cannot be used; the message
	// says where (file:line:column) and what is wrong.
	ErrInvalid = errors.New("config: invalid configuration")
	// ErrMissingIdentity reports a decision that lacks an identity value a
	// layer needs (for example no "user" for a per-user layer).
	ErrMissingIdentity = errors.New("config: missing identity value")
	// ErrInvalidIdentity reports an identity value that is empty or too
	// long, or a dimension name that is malformed.
	ErrInvalidIdentity = errors.New("config: invalid identity value")
	// ErrUnknownTier reports a tier name the configuration does not define.
	ErrUnknownTier = errors.New("config: unknown tier")
)

// Limits on what a configuration and a request may hold.
const (
	// MaxPolicies is the most policies one configuration may define.
	MaxPolicies = 1000
	// MaxTiers is the most tiers one configuration may define.
	MaxTiers = 64
	// MaxShards is the most keys a global layer may be sharded over.
	MaxShards = 256
	// MaxIdentityValueLen is the longest identity value, in bytes.
	MaxIdentityValueLen = 1024
	// MaxDimensionLen is the longest dimension or tier name.
	MaxDimensionLen = 32
	// MaxSize is the largest configuration document, in bytes.
	MaxSize = 1 << 20
)

// GlobalDimension is the dimension of a layer shared by every request (for
// example a server-wide edge limit): it needs no identity value.
const GlobalDimension = "global"

// DefaultTierName is the single tier of a configuration that defines none.
const DefaultTierName = "default"

// Config is one complete, validated configuration. It is immutable and safe
// for concurrent use; obtain it from Parse, Default or a Holder.
type Config struct {
	version string
	source  string
	hash    string
	// spaceHash and bodyHash hash the document with its spacing
	// normalised (normalizeSpace), whole and without its signature
	// line: they tell, in a refusal, what differs between two documents
	// of one version.
	spaceHash   string
	bodyHash    string
	defaultTier string
	tiers       []string
	policies    []*Policy
	byName      map[string]*Policy
	quotas      []*Quota
	quotaByName map[string]*Quota
	limits      []*ConcurrencyLimit
	limitByName map[string]*ConcurrencyLimit
}

// Version returns the configuration's version field ("" when absent).
func (c *Config) Version() string { return c.version }

// Source returns where the configuration came from (a file name or a Redis
// key), as given to Parse.
func (c *Config) Source() string { return c.source }

// Hash returns the hex SHA-256 of the document the configuration was parsed
// from, so two loads of the same bytes can be recognised.
func (c *Config) Hash() string { return c.hash }

// DefaultTier returns the tier applied to identities without an assignment.
func (c *Config) DefaultTier() string { return c.defaultTier }

// Tiers returns the tier names in the order they were declared. The caller
// must not modify the slice.
func (c *Config) Tiers() []string { return c.tiers }

// HasTier reports whether tier is defined.
func (c *Config) HasTier(tier string) bool {
	for _, t := range c.tiers {
		if t == tier {
			return true
		}
	}
	return false
}

// Policies returns the policies in the order they were declared. The caller
// must not modify the slice.
func (c *Config) Policies() []*Policy { return c.policies }

// Policy returns the policy called name.
func (c *Config) Policy(name string) (*Policy, bool) {
	p, ok := c.byName[name]
	return p, ok
}

// Quotas returns the quotas in the order they were declared. The caller
// must not modify the slice.
func (c *Config) Quotas() []*Quota { return c.quotas }

// Quota returns the quota called name.
func (c *Config) Quota(name string) (*Quota, bool) {
	q, ok := c.quotaByName[name]
	return q, ok
}

// ConcurrencyLimits returns the concurrency limits in the order they were
// declared. The caller must not modify the slice.
func (c *Config) ConcurrencyLimits() []*ConcurrencyLimit { return c.limits }

// ConcurrencyLimit returns the concurrency limit called name.
func (c *Config) ConcurrencyLimit(name string) (*ConcurrencyLimit, bool) {
	l, ok := c.limitByName[name]
	return l, ok
}

// Policy is one named policy: an ordered list of layers decided together,
// all-or-nothing.
type Policy struct {
	// Name identifies the policy in requests, e.g. "api".
	Name string
	// TierDimension is the identity value whose assigned tier applies to
	// the whole decision (e.g. "api_key"); "" means every request gets the
	// default tier.
	TierDimension string
	// OnRedisFailure is how the policy is decided while Redis cannot
	// decide (down, slow, or its circuit breaker open): FailLocal,
	// FailOpen or FailClosed; "" leaves it to the service's --fallback.
	// Login and billing policies should be FailClosed.
	OnRedisFailure string
	// Layers are decided together, in this order.
	Layers []*Layer
}

// The values of Policy.OnRedisFailure (field on_redis_failure).
const (
	// FailLocal decides with a per-instance in-memory limiter, at the
	// limit divided by the number of live instances.
	FailLocal = "local"
	// FailOpen admits every request.
	FailOpen = "open"
	// FailClosed denies every request.
	FailClosed = "closed"
)

// Tiered reports whether any layer's limits depend on the tier, so that
// looking up an identity's tier is worth it.
func (p *Policy) Tiered() bool {
	if p.TierDimension == "" {
		return false
	}
	for _, l := range p.Layers {
		if len(l.overrides) > 0 {
			return true
		}
	}
	return false
}

// Layer returns the layer called name.
func (p *Policy) Layer(name string) (*Layer, bool) {
	for _, l := range p.Layers {
		if l.Name == name {
			return l, true
		}
	}
	return nil, false
}

// Layer is one limit within a policy.
type Layer struct {
	// Name identifies the layer within its policy, e.g. "per-user".
	Name string
	// Dimensions are the identity values that key the layer, e.g. ["user"]
	// or ["user", "ip"]; empty for a global layer.
	Dimensions []string
	// Shards, for a global layer, is the number of keys its limit is split
	// over (each admits Limit/Shards) so that no single key is hot; 1
	// otherwise.
	Shards int
	// Cost, when positive, is what every request costs under this layer,
	// whatever the request's own cost (e.g. 1 for a request-counting layer
	// next to a token-counting quota). Zero uses the request's cost.
	Cost int64
	// Shadow makes the layer count but never deny: its result is reported
	// but does not block the request.
	Shadow bool

	base      floodgate.Policy
	overrides map[string]floodgate.Policy
}

// Dimension returns the layer's dimension as written in the configuration:
// "global" or the dimension names joined with "+".
func (l *Layer) Dimension() string { return dimensionName(l.Dimensions) }

// Policy returns the layer's rate limit under tier (the base limits when the
// tier has no override). For a sharded layer it is the limit of one shard.
// Every tier of a layer shares one policy name, so an identity that changes
// tier keeps its counters.
func (l *Layer) Policy(tier string) floodgate.Policy {
	if p, ok := l.overrides[tier]; ok {
		return p
	}
	return l.base
}

// Identity returns the identity the layer keys on, taken from values
// (dimension → value). A global layer's identity is "global", or
// "global/<n>" with a random shard n when it is sharded.
func (l *Layer) Identity(values map[string]string) (string, error) {
	if len(l.Dimensions) == 0 && l.Shards > 1 {
		return GlobalDimension + "/" + strconv.Itoa(rand.IntN(l.Shards)), nil
	}
	return identityOf("layer", l.Name, l.Dimensions, values)
}

// identityOf returns the identity that dims key on, taken from values:
// "global" for no dimensions, the value of a single one, or the values of
// several, length-prefixed so that no two value tuples join to the same
// string. kind and name say what needs the values in errors (`layer "x"`).
func identityOf(kind, name string, dims []string, values map[string]string) (string, error) {
	switch len(dims) {
	case 0:
		return GlobalDimension, nil
	case 1:
		return identityValue(kind, name, values, dims[0])
	}
	var b strings.Builder
	for _, d := range dims {
		v, err := identityValue(kind, name, values, d)
		if err != nil {
			return "", err
		}
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return b.String(), nil
}

func dimensionName(dims []string) string {
	if len(dims) == 0 {
		return GlobalDimension
	}
	return strings.Join(dims, "+")
}

// ShardIdentities returns every identity a global layer uses (one per
// shard), or nil for a layer keyed by identity values.
func (l *Layer) ShardIdentities() []string {
	if len(l.Dimensions) > 0 {
		return nil
	}
	if l.Shards <= 1 {
		return []string{GlobalDimension}
	}
	ids := make([]string, l.Shards)
	for i := range ids {
		ids[i] = GlobalDimension + "/" + strconv.Itoa(i)
	}
	return ids
}

func identityValue(kind, name string, values map[string]string, dim string) (string, error) {
	v, ok := values[dim]
	if !ok {
		return "", fmt.Errorf("%w: %s %q needs identity value %q", ErrMissingIdentity, kind, name, dim)
	}
	if err := ValidateIdentityValue(dim, v); err != nil {
		return "", err
	}
	return v, nil
}

// ValidateIdentityValue reports, wrapped in ErrInvalidIdentity, a dimension
// name that is not 1..32 characters of [a-z0-9_-] or a value that is empty
// or longer than MaxIdentityValueLen.
func ValidateIdentityValue(dim, value string) error {
	if err := validDimension(dim); err != nil {
		return fmt.Errorf("%w: identity dimension %v", ErrInvalidIdentity, err)
	}
	if value == "" {
		return fmt.Errorf("%w: identity value %q is empty or null; send a non-empty string", ErrInvalidIdentity, dim)
	}
	if len(value) > MaxIdentityValueLen {
		return fmt.Errorf("%w: identity value %q is %d bytes (max %d)", ErrInvalidIdentity, dim, len(value), MaxIdentityValueLen)
	}
	return nil
}

// Specs returns the layer specs of one decision by the identity values
// under tier: one per layer, in order. With peek every layer only checks.
// It fails with ErrMissingIdentity or ErrInvalidIdentity when values lack
// or malform what a layer needs, and with ErrUnknownTier for an undefined
// tier ("" means the configuration's default tier). A nil p (a policy
// Config.Policy did not find) or a nil c is an error, not a panic; a nil
// values holds no identity value.
func (c *Config) Specs(p *Policy, tier string, values map[string]string, peek bool) ([]floodgate.LayerSpec, error) {
	if c == nil {
		return nil, errors.New("config: Specs: nil configuration")
	}
	if p == nil {
		return nil, errors.New("config: Specs: nil policy")
	}
	if tier == "" {
		tier = c.defaultTier
	}
	if !c.HasTier(tier) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTier, tier)
	}
	specs := make([]floodgate.LayerSpec, len(p.Layers))
	for i, l := range p.Layers {
		id, err := l.Identity(values)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		specs[i] = floodgate.LayerSpec{Policy: l.Policy(tier), Identity: id, Cost: l.Cost, Peek: peek}
	}
	return specs, nil
}

// Difference says how a configuration document differs from another;
// the reload path and config push judge two documents of one version by
// it.
type Difference int

const (
	// SameDocument: the same bytes (the same Hash).
	SameDocument Difference = iota
	// SpacingOnly: the same document but for spacing or line ends (a
	// final newline, CR LF, trailing spaces), the signature line
	// included.
	SpacingOnly
	// SignatureOnly: the same content, spacing aside, under another
	// signature line (signed under another key, or one of the two
	// unsigned).
	SignatureOnly
	// OtherContent: anything else.
	OtherContent
)

// DifferenceFrom returns how c's document differs from other's.
func (c *Config) DifferenceFrom(other *Config) Difference {
	switch {
	case c.hash == other.hash:
		return SameDocument
	case c.spaceHash == other.spaceHash:
		return SpacingOnly
	case c.bodyHash == other.bodyHash:
		return SignatureOnly
	}
	return OtherContent
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// normalizeSpace returns data with CR LF line ends made LF, the spaces and
// tabs ending each line removed and the empty lines ending it dropped:
// what a shell's "$(cat FILE)", an editor or a Windows checkout change
// without changing the document's meaning.
func normalizeSpace(data []byte) []byte {
	lines := bytes.Split(data, []byte("\n"))
	for i, l := range lines {
		lines[i] = bytes.TrimRight(l, " \t\r")
	}
	for len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return bytes.Join(lines, []byte("\n"))
}

// validDimension checks a dimension or tier name: 1..32 of [a-z0-9_-].
func validDimension(s string) error {
	if s == "" || len(s) > MaxDimensionLen {
		return fmt.Errorf("name %q (%d bytes) must be 1..%d characters", clip.Text(s, 80), len(s), MaxDimensionLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("name %q: %s not in [a-z0-9_-]", s, clip.Char(s, i))
		}
	}
	return nil
}

// validName checks a policy or layer name: 1..64 of [A-Za-z0-9_-] (no dot,
// which joins them in storage keys).
func validName(s string) error {
	if s == "" || len(s) > floodgate.MaxNameLen {
		return fmt.Errorf("name %q (%d bytes) must be 1..%d characters", clip.Text(s, 80), len(s), floodgate.MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("name %q: %s not in [A-Za-z0-9_-]", s, clip.Char(s, i))
		}
	}
	return nil
}
