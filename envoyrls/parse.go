package envoyrls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/duration"
	"github.com/floodgate-rl/floodgate/internal/yamlerr"
)

// ParseConfig parses a descriptor configuration in envoyproxy/ratelimit's
// YAML format, with Floodgate's extensions, and validates it completely.
// filename names the file in error messages. A file may hold several YAML
// documents ("---"), one domain each:
//
//	domain: edge                     # required, unique
//	algorithm: sliding_window        # extension: default for the domain
//	descriptors:
//	  - key: remote_address          # required
//	    value: ""                    # optional; "" = any value; "abc*", "/a/*/b": patterns, first match in file order
//	    shadow_mode: false           # decide and count, never deny
//	    detailed_metric: false       # accepted, ignored (also value_to_metric, metadata)
//	    share_threshold: false       # true is refused (envoycompat honours it); so is quota_mode: true
//	    rate_limit:
//	      unit: second|minute|hour|day|week
//	      unit_multiplier: 1         # optional
//	      requests_per_unit: 100     # 0 denies every request
//	      unlimited: false           # matched, never limited
//	      name: per_ip               # optional, for replaces
//	      replaces: [{name: other}]  # optional
//	      algorithm: fixed_window    # extension: fixed_window (default), sliding_window, sliding_log, token_bucket, gcra
//	      window: 90s                # extension: any duration (or 30d) instead of unit
//	      burst: 20                  # extension: token_bucket and gcra only
//	    descriptors: [...]           # nested entries
//
// A key whose value is null ("value:", "shadow_mode: ~") is read as
// absent, as envoyproxy/ratelimit reads it. Unknown keys, wrong types and
// out-of-range values are errors. The error
// is a *ConfigError (wrapping ErrInvalidConfig) with the line and column of
// the offending node.
func ParseConfig(data []byte, filename string) (*Config, error) {
	p := &parser{file: filename}
	if len(data) > MaxConfigSize {
		return nil, p.errAt(nil, "file is %d bytes (max %d)", len(data), MaxConfigSize)
	}
	cfg := &Config{domains: map[string]*domain{}}
	names := map[string]*Rule{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, p.syntaxError(data, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := doc.Content[0]
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			continue
		}
		if err := p.checkAliases(root); err != nil {
			return nil, err
		}
		d, err := p.domain(root)
		if err != nil {
			return nil, err
		}
		if o := cfg.domains[d.name]; o != nil {
			return nil, p.errAt(root, "domain %q is already defined at line %d", d.name, o.line)
		}
		cfg.domains[d.name] = d
		for _, r := range p.rules {
			if err := checkUniquePolicy(names, r); err != nil {
				return nil, err
			}
		}
		cfg.rules = append(cfg.rules, p.rules...)
		p.rules = nil
	}
	if len(cfg.domains) == 0 {
		return nil, p.errAt(nil, "no domain: want a mapping with domain and descriptors")
	}
	return cfg, nil
}

// parser walks YAML nodes, keeping the position for errors.
type parser struct {
	file  string
	rules []*Rule // rules of the domain being parsed
	algo  floodgate.Algorithm
}

func (p *parser) errAt(n *yaml.Node, format string, args ...any) error {
	e := &ConfigError{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// resolve follows aliases. checkAliases has bounded the nodes they add.
func (p *parser) resolve(n *yaml.Node) (*yaml.Node, error) {
	for i := 0; n.Kind == yaml.AliasNode; i++ {
		if n.Alias == nil || i > 16 {
			return nil, p.errAt(n, "unresolvable alias")
		}
		n = n.Alias
	}
	return n, nil
}

// checkAliases refuses a document whose aliases, expanded, add more than
// maxAliasNodes nodes to its own (or refer to a node that contains them),
// before the parser walks it, following them. A document without aliases
// passes whatever its size: MaxConfigSize bounds it.
func (p *parser) checkAliases(root *yaml.Node) error {
	own, aliases := countNodes(root)
	if aliases == 0 {
		return nil
	}
	x := expansion{limit: own + maxAliasNodes, done: map[*yaml.Node]int{}, open: map[*yaml.Node]bool{}}
	if x.size(root) > x.limit {
		at := x.at
		if at == nil {
			at = root
		}
		return p.errAt(at, "aliases add more than %d nodes when expanded (the limit; the document has %d of its own)", maxAliasNodes, own)
	}
	return nil
}

// countNodes counts the nodes of n's tree, aliases as one node each, not
// followed, and the aliases among them.
func countNodes(n *yaml.Node) (nodes, aliases int) {
	nodes = 1
	if n.Kind == yaml.AliasNode {
		return 1, 1
	}
	for _, c := range n.Content {
		cn, ca := countNodes(c)
		nodes, aliases = nodes+cn, aliases+ca
	}
	return nodes, aliases
}

// expansion counts the nodes of a tree with its aliases expanded, up to
// just past limit: anchored nodes are counted once (done), so the work is
// linear in the document's own nodes; an alias to an anchored node being
// counted (open), which contains it, counts as past the limit. at is the
// alias whose expansion went past the limit.
type expansion struct {
	limit int
	done  map[*yaml.Node]int
	open  map[*yaml.Node]bool
	at    *yaml.Node
}

func (x *expansion) size(n *yaml.Node) int {
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return 1
		}
		s := x.size(n.Alias)
		if s > x.limit && x.at == nil {
			x.at = n
		}
		return s
	}
	if n.Anchor != "" {
		if s, ok := x.done[n]; ok {
			return s
		}
		if x.open[n] {
			return x.limit + 1
		}
		x.open[n] = true
		defer delete(x.open, n)
	}
	s := 1
	for _, c := range n.Content {
		if s += x.size(c); s > x.limit {
			s = x.limit + 1
			break
		}
	}
	if n.Anchor != "" {
		x.done[n] = s
	}
	return s
}

// fields checks that n is a mapping with only the allowed keys and returns
// its values by key, leaving out the keys whose value is null.
func (p *parser) fields(n *yaml.Node, what string, allowed ...string) (map[string]*yaml.Node, error) {
	n, err := p.resolve(n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errAt(n, "%s must be a mapping, got %s", what, yamlerr.Describe(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, p.errAt(k, "%s: keys must be plain strings", what)
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == k.Value
		}
		if !ok {
			return nil, p.errAt(k, "%s: unknown key %q (want %s)", what, k.Value, strings.Join(allowed, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errAt(k, "%s: key %q given twice", what, k.Value)
		}
		if v, err = p.resolve(v); err != nil {
			return nil, err
		}
		out[k.Value] = v
	}
	// A key written without a value (null: "value:", "value: ~") is read
	// as absent, as envoyproxy/ratelimit's loader reads it (the Go zero
	// value: no value, false, no limit); what the key says when absent,
	// or that it is required, applies.
	for k, v := range out {
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			delete(out, k)
		}
	}
	return out, nil
}

func (p *parser) syntaxError(data []byte, err error) error {
	line, msg := yamlerr.Syntax(data, err)
	return &ConfigError{File: p.file, Line: line, Msg: msg}
}

func (p *parser) str(n *yaml.Node, what string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", p.errAt(n, "%s must be a string, got %s", what, yamlerr.Describe(n))
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, what string) (bool, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, nil
		}
	}
	return false, p.errAt(n, "%s must be true or false, got %s", what, yamlerr.Describe(n))
}

func (p *parser) integer(n *yaml.Node, what string, lo, hi int64) (int64, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, p.errAt(n, "%s must be an integer, got %s", what, yamlerr.Describe(n))
	}
	var v int64
	if err := n.Decode(&v); err != nil || v < lo || v > hi {
		return 0, p.errAt(n, "%s %s out of range %d..%d", what, n.Value, lo, hi)
	}
	return v, nil
}

func (p *parser) algorithm(n *yaml.Node) (floodgate.Algorithm, error) {
	s, err := p.str(n, "algorithm")
	if err != nil {
		return 0, err
	}
	a, err := floodgate.ParseAlgorithm(s)
	if err != nil {
		return 0, p.errAt(n, "unknown algorithm %q (want fixed_window, sliding_window, sliding_log, token_bucket or gcra)", s)
	}
	return a, nil
}

// domain parses one document: a domain and its descriptors.
func (p *parser) domain(n *yaml.Node) (*domain, error) {
	f, err := p.fields(n, "configuration", "domain", "descriptors", "algorithm")
	if err != nil {
		return nil, err
	}
	dn := f["domain"]
	if dn == nil {
		return nil, p.errAt(n, "missing domain")
	}
	name, err := p.str(dn, "domain")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, p.errAt(dn, "domain is empty")
	}
	p.algo = floodgate.FixedWindow
	if an := f["algorithm"]; an != nil {
		if p.algo, err = p.algorithm(an); err != nil {
			return nil, err
		}
	}
	d := &domain{name: name, file: p.file, line: dn.Line, column: dn.Column, root: newNode("", "", n.Line)}
	if dl := f["descriptors"]; dl != nil {
		if err := p.descriptors(dl, d, d.root, nil, 1); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// descriptors parses a list of descriptors under parent, whose entries
// from the root are path.
func (p *parser) descriptors(n *yaml.Node, d *domain, parent *node, path []Entry, depth int) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.errAt(n, "descriptors must be a list, got %s", yamlerr.Describe(n))
	}
	if depth > MaxDepth {
		return p.errAt(n, "descriptors nested deeper than %d levels", MaxDepth)
	}
	for _, item := range n.Content {
		f, err := p.fields(item, "descriptor", "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric",
			"share_threshold", "quota_mode", "metadata")
		if err != nil {
			return err
		}
		kn := f["key"]
		if kn == nil {
			return p.errAt(item, "descriptor has no key")
		}
		key, err := p.str(kn, "key")
		if err != nil {
			return err
		}
		if key == "" {
			return p.errAt(kn, "descriptor has an empty key")
		}
		value := ""
		if vn := f["value"]; vn != nil {
			if vn.Kind == yaml.ScalarNode && vn.Tag == "!!float" {
				return p.errAt(vn, "value %s is a floating-point number, which envoyproxy/ratelimit refuses; quote it to mean the string", vn.Value)
			}
			if value, err = p.str(vn, "value"); err != nil {
				return err
			}
		}
		c := newNode(key, value, kn.Line)
		if o := parent.addChild(c); o != nil {
			return p.errAt(kn, "duplicate descriptor key %q value %q (first at line %d)", key, value, o.line)
		}
		if o := parent.claimComposite(c); o != nil {
			return p.errAt(kn, "descriptor key %q value %q and key %q value %q (line %d) have the same composite key %q, which envoyproxy/ratelimit refuses",
				key, value, o.key, o.value, o.line, c.composite())
		}
		for _, unsupported := range []string{"share_threshold", "quota_mode"} {
			if un := f[unsupported]; un != nil {
				on, err := p.boolean(un, unsupported)
				if err != nil {
					return err
				}
				if on {
					return p.errAt(un, "%s is not supported by serve --envoy-config; floodgate envoy-compat honours it", unsupported)
				}
			}
		}
		shadow := false
		if sn := f["shadow_mode"]; sn != nil {
			if shadow, err = p.boolean(sn, "shadow_mode"); err != nil {
				return err
			}
		}
		for _, ignored := range []string{"detailed_metric", "value_to_metric"} {
			if in := f[ignored]; in != nil {
				if _, err := p.boolean(in, ignored); err != nil {
					return err
				}
			}
		}
		cpath := append(path[:len(path):len(path)], Entry{key, value})
		if rn := f["rate_limit"]; rn != nil {
			if c.rule, err = p.rule(rn, d, cpath, shadow); err != nil {
				return err
			}
			p.rules = append(p.rules, c.rule)
		}
		if dl := f["descriptors"]; dl != nil {
			if err := p.descriptors(dl, d, c, cpath, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// rule parses a rate_limit mapping.
func (p *parser) rule(n *yaml.Node, d *domain, path []Entry, shadow bool) (*Rule, error) {
	f, err := p.fields(n, "rate_limit", "unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces", "algorithm", "window", "burst")
	if err != nil {
		return nil, err
	}
	r := &Rule{Domain: d.name, Path: displayPath(path), Shadow: shadow, File: p.file, Line: n.Line}
	if nn := f["name"]; nn != nil {
		if r.Name, err = p.str(nn, "name"); err != nil {
			return nil, err
		}
	}
	if rn := f["replaces"]; rn != nil {
		if r.Replaces, err = p.replaces(rn, r.Name); err != nil {
			return nil, err
		}
	}
	if un := f["unlimited"]; un != nil {
		if r.Unlimited, err = p.boolean(un, "unlimited"); err != nil {
			return nil, err
		}
	}
	if r.Unlimited {
		// requests_per_unit means nothing here and envoyproxy/ratelimit accepts it; a unit it refuses.
		if rn := f["requests_per_unit"]; rn != nil {
			if _, err := p.integer(rn, "requests_per_unit", 0, 1<<32-1); err != nil {
				return nil, err
			}
		}
		for _, k := range []string{"unit", "window", "unit_multiplier", "algorithm", "burst"} {
			if f[k] != nil {
				return nil, p.errAt(f[k], "%s given for an unlimited rate_limit", k)
			}
		}
		return r, nil
	}
	rpuNode := f["requests_per_unit"]
	if rpuNode == nil {
		return nil, p.errAt(n, "missing requests_per_unit (0 denies every request)")
	}
	rpu, err := p.integer(rpuNode, "requests_per_unit", 0, 1<<32-1)
	if err != nil {
		return nil, err
	}
	window, err := p.window(n, f)
	if err != nil {
		return nil, err
	}
	algo := p.algo
	if an := f["algorithm"]; an != nil {
		if algo, err = p.algorithm(an); err != nil {
			return nil, err
		}
	}
	var burst int64
	if bn := f["burst"]; bn != nil {
		if burst, err = p.integer(bn, "burst", 1, floodgate.MaxLimit); err != nil {
			return nil, err
		}
	}
	r.RequestsPerUnit, r.Unit, r.UnitMultiplier = describeWindow(rpu, window)
	r.limitPB = newCurrentLimit(r)
	if rpu == 0 {
		if burst != 0 {
			return nil, p.errAt(f["burst"], "burst given with requests_per_unit 0")
		}
		return r, nil
	}
	r.Policy = floodgate.Policy{Name: PolicyName(d.name, path...), Algorithm: algo, Limit: rpu, Window: window, Burst: burst}
	if err := r.Policy.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), floodgate.ErrInvalidPolicy.Error()+": ")
		return nil, p.errAt(n, "%s.%s: %s", d.name, r.Path, msg)
	}
	return r, nil
}

// window reads unit (with unit_multiplier) or window.
func (p *parser) window(n *yaml.Node, f map[string]*yaml.Node) (time.Duration, error) {
	un, wn, mn := f["unit"], f["window"], f["unit_multiplier"]
	switch {
	case un != nil && wn != nil:
		return 0, p.errAt(wn, "give unit or window, not both")
	case wn != nil:
		if mn != nil {
			return 0, p.errAt(mn, "unit_multiplier applies to unit, not window")
		}
		s, err := p.str(wn, "window")
		if err != nil {
			return 0, err
		}
		w, err := duration.Parse(s)
		if errors.Is(err, duration.ErrTooLong) {
			// Written as a duration, too long to be held.
			return 0, p.errAt(wn, "window %s out of range %v..%dd", s, floodgate.MinWindow, floodgate.MaxWindow/(24*time.Hour))
		}
		if err != nil {
			return 0, p.errAt(wn, "window %q: want a positive duration such as 90s, 1m30s, 250ms or 30d", s)
		}
		return w, nil
	case un != nil:
		s, err := p.str(un, "unit")
		if err != nil {
			return 0, err
		}
		u, ok := units[strings.ToLower(s)]
		if !ok {
			if l := strings.ToLower(s); l == "month" || l == "year" {
				return 0, p.errAt(un, "unit %q is a calendar period, which epoch-aligned windows cannot follow; use window (e.g. 720h)", s)
			}
			return 0, p.errAt(un, "unknown unit %q (want second, minute, hour, day or week)", s)
		}
		mult := int64(1)
		if mn != nil {
			var err error
			if mult, err = p.integer(mn, "unit_multiplier", 1, int64(floodgate.MaxWindow/u.d)); err != nil {
				return 0, err
			}
		}
		return time.Duration(mult) * u.d, nil
	}
	return 0, p.errAt(n, "missing unit (or window)")
}

func (p *parser) replaces(n *yaml.Node, self string) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errAt(n, "replaces must be a list of {name: ...}, got %s", yamlerr.Describe(n))
	}
	var out []string
	for _, item := range n.Content {
		f, err := p.fields(item, "replaces entry", "name")
		if err != nil {
			return nil, err
		}
		nn := f["name"]
		if nn == nil {
			return nil, p.errAt(item, "replaces entry has no name")
		}
		name, err := p.str(nn, "name")
		if err != nil {
			return nil, err
		}
		switch name {
		case "":
			return nil, p.errAt(nn, "replaces entry has an empty name")
		case self:
			return nil, p.errAt(nn, "rate_limit %q replaces itself", name)
		}
		out = append(out, name)
	}
	return out, nil
}
