package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/duration"
	"github.com/floodgate-rl/floodgate/internal/yamlerr"
)

// Error is one problem in a configuration document, at a position.
type Error struct {
	// File is the document's name as given to Parse.
	File string
	// Line and Column are 1-based; zero when unknown.
	Line, Column int
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as "file:line:column: message".
func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Unwrap makes every Error match ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// maxErrors bounds how many problems one Parse reports.
const maxErrors = 20

// Parse parses and validates a YAML configuration document. filename names
// it in error messages. Unknown fields, wrong types and out-of-range values
// are all errors; every problem found (up to 20) is reported, each as an
// *Error with its line and column, joined with errors.Join, and all wrap
// ErrInvalid. Only a fully valid document yields a Config.
func Parse(data []byte, filename string) (*Config, error) {
	if len(data) > MaxSize {
		return nil, &Error{File: filename, Msg: fmt.Sprintf("document is %d bytes (max %d)", len(data), MaxSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: filename, Msg: "empty document: want a mapping with a policies list"}
		}
		return nil, syntaxError(filename, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, syntaxError(filename, data, err)
		}
		return nil, &Error{File: filename, Line: line, Column: 1, Msg: "more than one YAML document (remove the second '---')"}
	}
	p := &parser{file: filename}
	p.noTags(&doc)
	p.noMergeKeys(&doc)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	c := p.document(&doc)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	c.source = filename
	c.hash = hashOf(data)
	body, _ := splitSignature(data)
	c.spaceHash, c.bodyHash = hashOf(normalizeSpace(data)), hashOf(normalizeSpace(body))
	return c, nil
}

// syntaxError turns a yaml.v3 error into an *Error with its line.
func syntaxError(file string, data []byte, err error) error {
	line, msg := yamlerr.Syntax(data, err)
	return &Error{File: file, Line: line, Msg: msg}
}

type parser struct {
	file string
	errs []error
	// found counts the problems found, those not in errs too (repeats
	// through an alias, those past maxErrors): a check that compares it
	// before and after a part knows whether that part had any.
	found int
	// seen holds the problems reported, by position and message with
	// its quoted names blanked out (see errorf).
	seen map[repeatKey]*repeated
}

// repeatKey identifies one problem at one position of the document,
// whatever names its message gives of where the value is used.
type repeatKey struct {
	line, column int
	shape        string
}

// repeated is a problem reported once, and how many more uses of its
// value, through aliases, have it too.
type repeated struct {
	err  *Error
	msg  string // err.Msg as first reported
	more int
}

// quoted matches a quoted name in a message, as %q writes it.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// noTags reports every node written with an explicit YAML tag (!!binary,
// !!float, !custom): the tags were ignored, a "!!binary aGVsbG8=" version
// read as the text "aGVsbG8=".
func (p *parser) noTags(n *yaml.Node) {
	if n == nil || n.Kind == yaml.AliasNode {
		return
	}
	if n.Style&yaml.TaggedStyle != 0 {
		p.errorf(n, "YAML tag %s is not supported: write the value without it", n.Tag)
	}
	for _, c := range n.Content {
		p.noTags(c)
	}
}

// noMergeKeys reports every YAML merge key (<<: *base, <<: [*a, *b]):
// the fields checks would refuse it as an unknown field "<<", which does
// not say that merging is what is not supported.
func (p *parser) noMergeKeys(n *yaml.Node) {
	if n == nil || n.Kind == yaml.AliasNode {
		return
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				p.errorf(k, "YAML merge keys (<<) are not supported: write the mapping's fields out (an alias can stand for a whole value, such as a whole layer)")
			}
		}
	}
	for _, c := range n.Content {
		p.noMergeKeys(c)
	}
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.found++
	e := &Error{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	// A value reached through several aliases is reported once: its
	// problem is found again at the same position for each use, under
	// the names of another policy or tier ("layer "x" of policy "p7""),
	// and would crowd out the document's other problems. The first
	// report says how many other uses have it.
	if e.Line > 0 {
		key := repeatKey{e.Line, e.Column, quoted.ReplaceAllString(e.Msg, `""`)}
		if r, ok := p.seen[key]; ok {
			if e.Msg != r.msg {
				r.more++
				uses := "uses"
				if r.more == 1 {
					uses = "use"
				}
				r.err.Msg = fmt.Sprintf("%s (and %d more %s of this value through an alias)", r.msg, r.more, uses)
			}
			return
		}
		if p.seen == nil {
			p.seen = map[repeatKey]*repeated{}
		}
		p.seen[key] = &repeated{err: e, msg: e.Msg}
	} else {
		for _, old := range p.errs {
			if o, ok := old.(*Error); ok && *o == *e {
				return
			}
		}
	}
	if len(p.errs) == maxErrors {
		p.errs = append(p.errs, &Error{File: p.file, Msg: "too many errors; stopping"})
	}
	if len(p.errs) > maxErrors {
		return
	}
	p.errs = append(p.errs, e)
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// field is one key of a mapping and its value.
type field struct {
	key, val *yaml.Node
}

// fields returns a mapping's entries, reporting unknown and duplicate keys;
// what names the mapping in messages ("layer", "policy"...).
func (p *parser) fields(n *yaml.Node, what string, known ...string) map[string]field {
	n = resolve(n)
	out := map[string]field{}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping, got %s", what, yamlerr.Describe(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		name := k.Value
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "%s: keys must be plain names", what)
			continue
		}
		if !contains(known, name) {
			p.errorf(k, "unknown field %q in %s (known fields: %s)", name, what, strings.Join(known, ", "))
			continue
		}
		if _, dup := out[name]; dup {
			p.errorf(k, "field %q appears twice in %s", name, what)
			continue
		}
		out[name] = field{k, resolve(v)}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) scalar(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, "%s must be a single value, got %s", what, yamlerr.Describe(n))
		return "", false
	}
	return n.Value, true
}

// unquoted returns a number's or a boolean's text, refusing it quoted: a
// quoted "2" is text in YAML, and taking it as a number would make the
// same mistake pass or fail by how it is spelled ("yes" is refused).
func (p *parser) unquoted(n *yaml.Node, what, kind string) (string, bool) {
	s, ok := p.scalar(n, what)
	if ok && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		p.errorf(n, "%s must be %s, got the quoted text %q: write it without quotes", what, kind, s)
		return "", false
	}
	return s, ok
}

func (p *parser) str(n *yaml.Node, what string) string {
	s, _ := p.scalar(n, what)
	return s
}

// integer parses a whole number (underscores allowed between digits, as in
// 10_000) in min..max.
func (p *parser) integer(n *yaml.Node, what string, min, max int64) (int64, bool) {
	s, ok := p.unquoted(n, what, "a whole number")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "_") && !strings.HasSuffix(s, "_") {
		// A whole number, but past int64: say it is out of range, not
		// that it is no number.
		p.errorf(n, "%s %s out of range %d..%d", what, s, min, max)
		return 0, false
	}
	if err != nil || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") {
		p.errorf(n, "%s must be a whole number, got %q", what, s)
		return 0, false
	}
	if v < min || v > max {
		p.errorf(n, "%s %d out of range %d..%d", what, v, min, max)
		return 0, false
	}
	return v, true
}

func (p *parser) boolean(n *yaml.Node, what string) bool {
	s, ok := p.unquoted(n, what, "true or false")
	if !ok {
		return false
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	p.errorf(n, "%s must be true or false, got %q", what, s)
	return false
}

// duration parses the duration of what, whose range is min..max (the
// caller checks it after): a duration too long to be held is reported out
// of that range, not as a mistake in its writing.
func (p *parser) duration(n *yaml.Node, what string, min, max time.Duration) (time.Duration, bool) {
	s, ok := p.scalar(n, what)
	if !ok {
		return 0, false
	}
	d, err := ParseDuration(s)
	switch {
	case errors.Is(err, duration.ErrTooLong):
		p.errorf(n, "%s %s out of range %s..%s", what, s, duration.Format(min), duration.Format(max))
		return 0, false
	case err != nil:
		p.errorf(n, "%s: %v", what, err)
		return 0, false
	}
	return d, true
}

func (p *parser) list(n *yaml.Node, what string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list, got %s", what, yamlerr.Describe(n))
		return nil
	}
	return n.Content
}

// document parses the top level.
func (p *parser) document(doc *yaml.Node) *Config {
	c := &Config{byName: map[string]*Policy{}, quotaByName: map[string]*Quota{}, limitByName: map[string]*ConcurrencyLimit{}}
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	f := p.fields(root, "the configuration", "version", "default_tier", "tiers", "policies", "quotas", "concurrency")
	if v, ok := f["version"]; ok {
		c.version = p.str(v.val, "version")
		if len(c.version) > 64 {
			p.errorf(v.val, "version is %d characters (max 64)", len(c.version))
		}
	}
	tierNodes := map[string]*yaml.Node{}
	if t, ok := f["tiers"]; ok {
		items := p.list(t.val, "tiers")
		if len(items) == 0 && t.val.Kind == yaml.SequenceNode {
			p.errorf(t.val, "tiers is empty: list at least one tier, or remove the field")
		}
		if len(items) > MaxTiers {
			p.errorf(t.val, "%d tiers (max %d)", len(items), MaxTiers)
			items = nil
		}
		for _, it := range items {
			it = resolve(it)
			name, ok := p.scalar(it, "a tier")
			if !ok {
				continue
			}
			if err := validDimension(name); err != nil {
				p.errorf(it, "tier %v", err)
				continue
			}
			if _, dup := tierNodes[name]; dup {
				p.errorf(it, "tier %q is listed twice", name)
				continue
			}
			tierNodes[name] = it
			c.tiers = append(c.tiers, name)
		}
	}
	if d, ok := f["default_tier"]; ok {
		c.defaultTier = p.str(d.val, "default_tier")
		if c.defaultTier != "" && len(c.tiers) > 0 && !c.HasTier(c.defaultTier) {
			p.errorf(d.val, "default_tier %q is not one of the tiers (%s)", c.defaultTier, strings.Join(c.tiers, ", "))
		}
		if _, listed := f["tiers"]; !listed {
			p.errorf(d.key, "default_tier needs a tiers list")
		}
	} else if len(c.tiers) > 0 {
		if _, hasFree := tierNodes["free"]; hasFree {
			c.defaultTier = "free"
		} else {
			p.errorf(f["tiers"].key, "default_tier is required when the tiers do not include \"free\"")
		}
	}
	if len(c.tiers) == 0 && c.defaultTier == "" {
		c.tiers, c.defaultTier = []string{DefaultTierName}, DefaultTierName
	}
	pol, hasPolicies := f["policies"]
	if hasPolicies {
		p.policies(pol, c)
	}
	p.quotas(f, c)
	p.concurrency(f, c)
	_, hasQuotas := f["quotas"]
	_, hasLimits := f["concurrency"]
	if !hasPolicies && !hasQuotas && !hasLimits {
		p.errorf(root, "missing field \"policies\": a configuration defines at least one policy (or a quota or concurrency limit)")
	}
	return c
}

// policies parses the policies list.
func (p *parser) policies(pol field, c *Config) {
	items := p.list(pol.val, "policies")
	if len(items) == 0 && pol.val.Kind == yaml.SequenceNode {
		p.errorf(pol.val, "policies is empty: define at least one policy")
	}
	if len(items) > MaxPolicies {
		p.errorf(pol.val, "%d policies (max %d)", len(items), MaxPolicies)
		return
	}
	for _, it := range items {
		pp := p.policy(resolve(it), c)
		if pp == nil {
			continue
		}
		if _, dup := c.byName[pp.Name]; dup {
			p.errorf(it, "policy %q is defined twice", pp.Name)
			continue
		}
		c.byName[pp.Name] = pp
		c.policies = append(c.policies, pp)
	}
}

func (p *parser) policy(n *yaml.Node, c *Config) *Policy {
	f := p.fields(n, "policy", "name", "tier_dimension", "on_redis_failure", "layers")
	if n.Kind != yaml.MappingNode {
		return nil
	}
	pol := &Policy{}
	name, ok := f["name"]
	if !ok {
		p.errorf(n, "policy has no name")
		return nil
	}
	pol.Name = p.str(name.val, "policy name")
	if err := validName(pol.Name); err != nil {
		p.errorf(name.val, "policy %v", err)
		return nil
	}
	what := fmt.Sprintf("policy %q", pol.Name)
	if td, ok := f["tier_dimension"]; ok {
		pol.TierDimension = p.str(td.val, what+" tier_dimension")
		if err := validDimension(pol.TierDimension); err != nil {
			p.errorf(td.val, "%s tier_dimension %v", what, err)
		} else if pol.TierDimension == GlobalDimension {
			p.errorf(td.val, "%s tier_dimension cannot be %q: tiers are assigned per identity", what, GlobalDimension)
		}
	}
	if fm, ok := f["on_redis_failure"]; ok {
		switch v := p.str(fm.val, what+" on_redis_failure"); v {
		case FailLocal, FailOpen, FailClosed:
			pol.OnRedisFailure = v
		default:
			p.errorf(fm.val, "%s on_redis_failure %q: want local, open or closed", what, v)
		}
	}
	ls, ok := f["layers"]
	if !ok {
		p.errorf(n, "%s has no layers", what)
		return pol
	}
	items := p.list(ls.val, what+" layers")
	if ls.val.Kind == yaml.SequenceNode && (len(items) == 0 || len(items) > floodgate.MaxLayers) {
		p.errorf(ls.val, "%s has %d layers (want 1..%d)", what, len(items), floodgate.MaxLayers)
		return pol
	}
	for _, it := range items {
		l := p.layer(resolve(it), pol, c)
		if l == nil {
			continue
		}
		if _, dup := pol.Layer(l.Name); dup {
			p.errorf(it, "%s: layer %q is defined twice", what, l.Name)
			continue
		}
		pol.Layers = append(pol.Layers, l)
	}
	return pol
}
