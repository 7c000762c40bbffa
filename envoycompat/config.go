package envoycompat

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	yaml "gopkg.in/yaml.v2"

	"github.com/floodgate-rl/floodgate/envoyrls"
)

// ErrInvalidConfig is wrapped by every error Load returns.
var ErrInvalidConfig = errors.New("envoycompat: invalid configuration")

// ConfigError is a configuration file envoyproxy/ratelimit's loader would
// refuse. File is the runtime key of the file (its path below the runtime
// directory, "/" replaced by "."), Msg says what is wrong.
type ConfigError struct {
	File string
	Msg  string
}

func (e *ConfigError) Error() string { return e.File + ": " + e.Msg }

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// File is one configuration file to load: its runtime key and content.
type File struct {
	Name string
	Data []byte
}

// MaxFileSize is the largest configuration file Load reads.
const MaxFileSize = 4 << 20

// Limit is one configured rate_limit as the service applies it.
type Limit struct {
	// StatKey is the node's path as envoyproxy/ratelimit names it in its
	// stats: the domain, then "key" or "key_value" per level, joined with
	// "." (for example "edge.remote_address" or "mongo_cps.database_users").
	StatKey string
	// Proto is the limit reported in current_limit. Shared: do not modify.
	Proto *rlspb.RateLimitResponse_RateLimit
	// Unlimited, Shadow and Quota are the node's unlimited, shadow_mode and
	// quota_mode.
	Unlimited, Shadow, Quota bool
	// DetailedMetric is the node's detailed_metric.
	DetailedMetric bool
	// Name and Replaces are the rate_limit's name and replaces names.
	Name     string
	Replaces []string
	// Metadata is the node's metadata (nil when none).
	Metadata *structpb.Struct
	// sharePattern, per request entry index, is the wildcard value that
	// stands in for the entry's value in the counter key (share_threshold);
	// nil when none applies.
	sharePattern []string
	// metricKey is the stats key for this request when it differs from
	// StatKey (detailed_metric, value_to_metric, share_threshold).
	metricKey string
	// domain is the request's domain, which starts StatKey and
	// metricKey (followed by "."); set by Match.
	domain string
}

// MetricKey returns the stats key a decision under l is counted under.
func (l *Limit) MetricKey() string {
	if l.metricKey != "" {
		return l.metricKey
	}
	return l.StatKey
}

// Config is a loaded configuration. It is immutable and safe for
// concurrent use.
type Config struct {
	domains  map[string]*node
	warnings []string
}

// Warnings returns what Load accepted but ignored, as envoyproxy/ratelimit
// ignores it (a known key in a place where it has no meaning): one
// sentence per key, naming the file and the key.
func (c *Config) Warnings() []string { return c.warnings }

// Empty reports a configuration without any domain.
func (c *Config) Empty() bool { return len(c.domains) == 0 }

// Domains returns the configured domain names, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// node is one descriptor of the tree, keyed by its composite key ("key" or
// "key_value") in its parent, as envoyproxy/ratelimit keys it.
type node struct {
	children map[string]*node
	// wild lists the children whose composite key holds a "*", in the
	// order they were loaded: the first that matches wins.
	wild           []wildEntry
	limit          *Limit
	valueToMetric  bool
	shareThreshold bool
	pattern        string // composite key of a share_threshold wildcard node
	metadata       *structpb.Struct
}

type wildEntry struct {
	key   string
	parts []string
}

// validKeys are the keys envoyproxy/ratelimit's loader accepts anywhere.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true,
	"share_threshold": true, "metadata": true,
}

// keys each level reads; a valid key elsewhere is ignored with a warning.
var (
	rootKeys       = set("domain", "descriptors")
	descriptorKeys = set("key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata")
	rateLimitKeys  = set("requests_per_unit", "unit", "unlimited", "name", "replaces")
	replacesKeys   = set("name")
)

func set(ks ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range ks {
		m[k] = true
	}
	return m
}

type yamlRoot struct {
	Domain      string
	Descriptors []yamlDescriptor
}

type yamlDescriptor struct {
	Key            string
	Value          string
	RateLimit      *yamlRateLimit `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor
	ShadowMode     bool `yaml:"shadow_mode"`
	QuotaMode      bool `yaml:"quota_mode"`
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	ShareThreshold bool `yaml:"share_threshold"`
	Metadata       map[string]interface{}
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string
	Unlimited       bool
	Name            string
	Replaces        []struct{ Name string }
}

// Load builds a configuration from files in order, accepting and refusing
// exactly what envoyproxy/ratelimit's loader accepts and refuses: each file
// is one YAML document (later documents are not read); every mapping key
// anywhere must be one of the format's keys (metadata excepted), and every
// scalar a string, an integer, a boolean or null; a domain may appear in
// one file only unless merge is set (their MERGE_DOMAIN_CONFIG), in which
// case later files add descriptors to it; two descriptors of one level may
// not have the same composite key ("key_value", or "key" without value);
// unit is one of second, minute, hour, day, week, month, year (any case),
// required unless unlimited, and refused with unlimited; a missing
// requests_per_unit is 0 (every request over the limit); share_threshold
// needs a "*" in the composite key. The error is a *ConfigError.
func Load(files []File, merge bool) (cfg *Config, err error) {
	cfg = &Config{domains: map[string]*node{}}
	for _, f := range files {
		if len(f.Data) > MaxFileSize {
			// Larger, not "N bytes": a file read from disk is read up to
			// one byte past the limit only (readLimited).
			return nil, &ConfigError{File: f.Name, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
		}
		root, err := cfg.parseFile(f)
		if err != nil {
			return nil, err
		}
		if err := cfg.loadRoot(f.Name, root, merge); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func (c *Config) parseFile(f File) (*yamlRoot, error) {
	generic := map[interface{}]interface{}{}
	if err := yaml.Unmarshal(f.Data, &generic); err != nil {
		return nil, &ConfigError{File: f.Name, Msg: "error loading config file: " + err.Error()}
	}
	if err := c.checkKeys(f.Name, generic, rootKeys, "the top level"); err != nil {
		return nil, err
	}
	var root yamlRoot
	if err := yaml.Unmarshal(f.Data, &root); err != nil {
		return nil, &ConfigError{File: f.Name, Msg: "error loading config file: " + err.Error()}
	}
	return &root, nil
}

// checkKeys walks the generic document as envoyproxy/ratelimit validates
// it. here is the set of keys the current level reads: a valid key outside
// it is accepted (theirs accepts it) and recorded as a warning.
func (c *Config) checkKeys(file string, m map[interface{}]interface{}, here map[string]bool, where string) error {
	keys := make([]string, 0, len(m))
	var notString []string
	for k := range m {
		s, ok := k.(string)
		if !ok {
			notString = append(notString, fmt.Sprint(k))
			continue
		}
		keys = append(keys, s)
	}
	if len(notString) > 0 {
		// The first in sorted order, so that a file gives the same error
		// at every load, whatever the map's order.
		sort.Strings(notString)
		return &ConfigError{File: file, Msg: "config error, key is not of type string: " + notString[0]}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		if !validKeys[k] {
			return &ConfigError{File: file, Msg: fmt.Sprintf("config error, unknown key '%s'", k)}
		}
		if here != nil && !here[k] {
			c.warnings = append(c.warnings, fmt.Sprintf("%s: key %q has no meaning in %s and is ignored (as envoyproxy/ratelimit ignores it)", file, k, where))
		}
		if k == "metadata" {
			continue
		}
		next, nextWhere := childLevel(k)
		switch v := v.(type) {
		case []interface{}:
			for _, e := range v {
				em, ok := e.(map[interface{}]interface{})
				if !ok {
					return &ConfigError{File: file, Msg: fmt.Sprintf("config error, yaml file contains list of type other than map: %v", e)}
				}
				if err := c.checkKeys(file, em, next, nextWhere); err != nil {
					return err
				}
			}
		case map[interface{}]interface{}:
			if err := c.checkKeys(file, v, next, nextWhere); err != nil {
				return err
			}
		case string, int, bool, nil:
		default:
			return &ConfigError{File: file, Msg: fmt.Sprintf("config error, value of key '%s' is a %T (want a string, an integer, a boolean, a list or a mapping)", k, v)}
		}
	}
	return nil
}

// childLevel returns the keys read below key k, nil when nothing below it
// is read at all.
func childLevel(k string) (map[string]bool, string) {
	switch k {
	case "descriptors":
		return descriptorKeys, "a descriptor"
	case "rate_limit":
		return rateLimitKeys, "a rate_limit"
	case "replaces":
		return replacesKeys, "a replaces entry"
	}
	return map[string]bool{}, "a value of key " + k
}

func (c *Config) loadRoot(file string, root *yamlRoot, merge bool) error {
	if root.Domain == "" {
		return &ConfigError{File: file, Msg: "config file cannot have empty domain"}
	}
	d := c.domains[root.Domain]
	if d != nil && !merge {
		return &ConfigError{File: file, Msg: fmt.Sprintf("duplicate domain '%s' in config file", root.Domain)}
	}
	if d == nil {
		d = &node{children: map[string]*node{}}
	}
	if err := d.load(file, root.Domain+".", root.Descriptors); err != nil {
		return err
	}
	c.domains[root.Domain] = d
	return nil
}

// units maps the unit names (upper-cased) to Envoy's enum; UNKNOWN is not
// a unit.
func unitOf(s string) (rlspb.RateLimitResponse_RateLimit_Unit, bool) {
	v, ok := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	return rlspb.RateLimitResponse_RateLimit_Unit(v), ok && v != int32(rlspb.RateLimitResponse_RateLimit_UNKNOWN)
}

func (n *node) load(file, parent string, descs []yamlDescriptor) error {
	for _, dc := range descs {
		if dc.Key == "" {
			return &ConfigError{File: file, Msg: "descriptor has empty key"}
		}
		ck := dc.Key
		if dc.Value != "" {
			ck += "_" + dc.Value
		}
		path := parent + ck
		if _, dup := n.children[ck]; dup {
			return &ConfigError{File: file, Msg: fmt.Sprintf("duplicate descriptor composite key '%s'", path)}
		}
		child := &node{children: map[string]*node{}, valueToMetric: dc.ValueToMetric, shareThreshold: dc.ShareThreshold}
		if rl := dc.RateLimit; rl != nil {
			unit, valid := unitOf(rl.Unit)
			switch {
			case rl.Unlimited && valid:
				return &ConfigError{File: file, Msg: fmt.Sprintf("%s: should not specify rate limit unit when unlimited", path)}
			case !rl.Unlimited && !valid:
				return &ConfigError{File: file, Msg: fmt.Sprintf("%s: invalid rate limit unit '%s'", path, rl.Unit)}
			}
			lim := &Limit{
				StatKey:        path,
				Proto:          &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: rl.RequestsPerUnit, Unit: unit, Name: rl.Name},
				Unlimited:      rl.Unlimited,
				Shadow:         dc.ShadowMode,
				Quota:          dc.QuotaMode,
				DetailedMetric: dc.DetailedMetric,
				Name:           rl.Name,
			}
			for _, r := range rl.Replaces {
				switch r.Name {
				case "":
					return &ConfigError{File: file, Msg: fmt.Sprintf("%s: should not have an empty replaces entry", path)}
				case rl.Name:
					return &ConfigError{File: file, Msg: fmt.Sprintf("%s: replaces should not contain name of same descriptor", path)}
				}
				lim.Replaces = append(lim.Replaces, r.Name)
			}
			child.limit = lim
		}
		wild := strings.Contains(ck, "*")
		if dc.ShareThreshold {
			if !wild {
				return &ConfigError{File: file, Msg: fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", ck)}
			}
			child.pattern = ck
		}
		if wild {
			n.wild = append(n.wild, wildEntry{key: ck, parts: strings.Split(ck, "*")})
		}
		md, err := metadataStruct(dc.Metadata)
		if err != nil {
			return &ConfigError{File: file, Msg: fmt.Sprintf("%s: error parsing metadata: %v", path, err)}
		}
		child.metadata = md
		if child.limit != nil {
			child.limit.Metadata = md
		}
		if err := child.load(file, path+".", dc.Descriptors); err != nil {
			return err
		}
		n.children[ck] = child
	}
	return nil
}

// metadataStruct converts a metadata mapping to a protobuf Struct.
func metadataStruct(m map[string]interface{}) (*structpb.Struct, error) {
	if len(m) == 0 {
		return nil, nil
	}
	conv := make(map[string]interface{}, len(m))
	for k, v := range m {
		conv[k] = plain(v)
	}
	return structpb.NewStruct(conv)
}

// plain turns YAML mappings with any keys into map[string]any, keys
// formatted with %v, recursively.
func plain(v interface{}) interface{} {
	switch v := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(v))
		for k, e := range v {
			out[fmt.Sprintf("%v", k)] = plain(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(v))
		for i, e := range v {
			out[i] = plain(e)
		}
		return out
	}
	return v
}

// wildcardMatch reports whether s matches pattern parts: the same rule as
// the native loader's, kept in one place.
func wildcardMatch(parts []string, s string) bool { return envoyrls.MatchWildcard(parts, s) }
