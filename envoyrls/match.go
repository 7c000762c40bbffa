package envoyrls

import (
	"strconv"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/clip"
)

// plan is what one request asks for: per descriptor, the rule it matched,
// and the distinct layers to decide in one floodgate call. Plans are
// reused (getPlan, release): every slice keeps its capacity.
type plan struct {
	// cost is the request's hits_addend (default 1).
	cost int64
	// descs has one entry per request descriptor, in order.
	descs []descPlan
	// layers are the distinct (policy, identity) pairs to decide; two
	// descriptors naming the same counter share one layer and add their
	// costs.
	layers []layerPlan
	// denyAll reports that an enforced rule with requests_per_unit 0
	// matched, or an enforced layer's cost is above what any limit
	// admits: the request is over the limit whatever the store says.
	denyAll bool
	// overCost reports a request hits_addend above the maximum.
	overCost bool

	// costs holds each descriptor's cost while planning.
	costs []int64
	// specs, active and results are the scratch space of Service.decide.
	specs   []floodgate.LayerSpec
	active  []int
	results []floodgate.Result
}

// plans recycles plans, so that a request allocates none of its
// per-descriptor bookkeeping.
var plans = sync.Pool{New: func() any { return new(plan) }}

// getPlan returns an empty plan for n descriptors.
func getPlan(n int) *plan {
	p := plans.Get().(*plan)
	p.cost, p.denyAll, p.overCost = 1, false, false
	p.descs = grow(p.descs, n)
	p.costs = grow(p.costs, n)
	p.layers = p.layers[:0]
	return p
}

// maxPooledDescs is the most descriptors a plan handed back for reuse
// may have room for: a request may carry thousands (only its distinct
// limited counters are bounded, by floodgate.MaxLayers), and a pooled
// plan would keep that room for requests of a few.
const maxPooledDescs = 64

// release hands p back for reuse, unless it grew past what requests
// usually need; p must not be used afterwards.
func (p *plan) release() {
	if cap(p.descs) > maxPooledDescs {
		return
	}
	clear(p.descs)
	clear(p.layers[:cap(p.layers)])
	clear(p.specs[:cap(p.specs)])
	clear(p.results[:cap(p.results)])
	plans.Put(p)
}

// grow returns s resized to n zero elements, reusing its array when it
// is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// descPlan is the outcome of matching one request descriptor.
type descPlan struct {
	// rule is the matched rule; nil when nothing matched, the rule was
	// replaced, or a limit override applies.
	rule *Rule
	// limit is reported as current_limit; nil when no limit applies. It
	// may be shared by many answers (a rule's): never modify it.
	limit *rlspb.RateLimitResponse_RateLimit
	// unlimited reports a matched unlimited rule.
	unlimited bool
	// denies reports a requests_per_unit 0 limit.
	denies bool
	// shadow reports a shadow-mode rule.
	shadow bool
	// identity is the descriptor's identity (see Identity).
	identity string
	// override is the policy of a limit override sent with the request.
	override floodgate.Policy
	// layer indexes plan.layers; -1 when the descriptor is not decided.
	layer int
	// overCost reports a hits_addend above the maximum.
	overCost bool
}

// layerPlan is one layer of the decision.
type layerPlan struct {
	spec   floodgate.LayerSpec
	shadow bool
	// overCost reports a cost no limit admits (a hits_addend above the
	// maximum, or costs of descriptors sharing the layer adding up past
	// floodgate.MaxCost): the layer peeks and is OVER_LIMIT.
	overCost bool
}

// limits are the request bounds a plan enforces.
type limits struct {
	maxHits        int64
	ignoreOverride bool
	// countEach gives each descriptor its own layer (see
	// Options.CountEachDescriptor).
	countEach bool
}

// plan validates req against the configuration and matches each of its
// descriptors. Errors wrap ErrInvalidRequest and say which descriptor and
// entry is at fault. The caller may release the plan once done with it.
//
// Only what the service cannot decide is refused: an entry with an empty
// key, a descriptor deeper than any configured one, or a very long key or
// value matches nothing or is hashed into its key, and a hits_addend above
// the maximum makes its descriptor OVER_LIMIT, so that a client cannot
// escape every limit of a request (the per-IP one too) by making Envoy send
// such an entry.
func (c *Config) plan(req *rlspb.RateLimitRequest, lim limits) (*plan, error) {
	if req.GetDomain() == "" {
		return nil, invalidRequest(RejectDomain, "domain is empty")
	}
	d := c.domains[req.GetDomain()]
	if d == nil {
		return nil, invalidRequest(RejectDomain, "unknown domain %q", clip.Text(req.GetDomain(), 80))
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, invalidRequest(RejectDescriptors, "no descriptors")
	}
	if len(descs) > MaxRequestDescriptors {
		// The codec decodes one past the bound (internal/rlswire): the
		// request may carry more than len(descs).
		return nil, invalidRequest(RejectDescriptors, "at least %d descriptors (repeats included): a request carries at most %d", len(descs), MaxRequestDescriptors)
	}
	p := getPlan(len(descs))
	if h := int64(req.GetHitsAddend()); h != 0 {
		if h > lim.maxHits {
			p.overCost = true
		} else {
			p.cost = h
		}
	}
	if err := c.match(p, d, descs, lim); err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

// match fills p in for descs, the request's descriptors in domain d.
func (c *Config) match(p *plan, d *domain, descs []*ratelimitv3.RateLimitDescriptor, lim limits) error {
	for i, desc := range descs {
		cost, over, err := checkDescriptor(i, desc, p.cost, p.overCost, lim)
		if err != nil {
			return err
		}
		p.costs[i] = cost
		dp := &p.descs[i]
		dp.layer = -1
		dp.overCost = over
		if o := desc.GetLimit(); o != nil && !lim.ignoreOverride {
			if err := overrideLimit(i, d.name, o, dp); err != nil {
				return err
			}
			continue
		}
		if dp.rule = d.match(desc.GetEntries()); dp.rule != nil {
			dp.unlimited = dp.rule.Unlimited
			dp.denies = dp.rule.denies()
			dp.shadow = dp.rule.Shadow
			if !dp.unlimited {
				dp.limit = dp.rule.currentLimit()
			}
		}
	}
	applyReplaces(p)
	for i := range p.descs {
		dp := &p.descs[i]
		if dp.denies && !dp.shadow {
			p.denyAll = true
		}
		if dp.limit == nil {
			continue
		}
		dp.identity = entriesIdentity(descs[i].GetEntries())
		pol := dp.policy()
		if pol.Limit == 0 {
			continue
		}
		// Two descriptors naming one counter share its layer in one
		// all-or-nothing decision (a scan: there are at most
		// floodgate.MaxLayers layers, fewer than a map costs). Deciding
		// each descriptor on its own, as theirs does, decides them one
		// by one, in order.
		j := len(p.layers)
		if !lim.countEach {
			j = 0
			for ; j < len(p.layers); j++ {
				if s := &p.layers[j].spec; s.Identity == dp.identity && s.Policy.Name == pol.Name {
					break
				}
			}
		}
		dp.layer = j
		if j < len(p.layers) {
			l := &p.layers[j]
			// Each cost is at most lim.maxHits, far below MaxInt64:
			// the sum cannot overflow before it passes MaxCost.
			if l.spec.Cost += p.costs[i]; dp.overCost || l.spec.Cost > floodgate.MaxCost {
				l.overCost = true
			}
			continue
		}
		if len(p.layers) == floodgate.MaxLayers {
			if lim.countEach {
				return invalidRequest(RejectDescriptors, "more than %d descriptors with a limit (one decision each)", floodgate.MaxLayers)
			}
			return invalidRequest(RejectDescriptors, "descriptors name more than %d distinct limited counters (the most one decision takes)", floodgate.MaxLayers)
		}
		p.layers = append(p.layers, layerPlan{
			spec:     floodgate.LayerSpec{Policy: pol, Identity: dp.identity, Cost: p.costs[i]},
			shadow:   dp.shadow,
			overCost: dp.overCost,
		})
	}
	for i := range p.layers {
		l := &p.layers[i]
		if l.overCost {
			// No limit admits such a cost: the layer only reports where
			// its counter stands, and is OVER_LIMIT (see Service.decide).
			l.spec.Cost = 0
			if !l.shadow {
				p.denyAll = true
			}
		}
		if l.spec.Cost == 0 {
			l.spec.Peek = true
		}
	}
	return nil
}

// policy returns the policy a descriptor is decided under; its Limit is 0
// when it is not decided by the store.
func (dp *descPlan) policy() floodgate.Policy {
	if dp.rule != nil {
		return dp.rule.Policy
	}
	return dp.override
}

// checkDescriptor validates descriptor i and returns its cost: its own
// hits_addend when set (0 checks without consuming), the request's
// otherwise; over reports a cost above lim.maxHits (the request's when
// reqOver), which no limit admits (cost is then 0). An entry with an empty
// key, more entries than MaxDepth, and keys and values of any length are
// accepted: they match no configured node (whose keys are never empty,
// and which are at most MaxDepth deep), or are hashed into the storage
// key. The gRPC server's message size limit bounds their length.
func checkDescriptor(i int, desc *ratelimitv3.RateLimitDescriptor, cost int64, reqOver bool, lim limits) (_ int64, over bool, _ error) {
	if desc == nil {
		return 0, false, invalidRequest(RejectDescriptor, "descriptor %d is null", i)
	}
	if len(desc.GetEntries()) == 0 {
		return 0, false, invalidRequest(RejectDescriptor, "descriptor %d has no entries", i)
	}
	if desc.GetIsNegativeHits() {
		return 0, false, invalidRequest(RejectHitsAddend, "descriptor %d: is_negative_hits (refunding hits) is not supported", i)
	}
	for j, e := range desc.GetEntries() {
		if e == nil {
			return 0, false, invalidRequest(RejectDescriptor, "descriptor %d entry %d is null", i, j)
		}
	}
	if h := desc.GetHitsAddend(); h != nil {
		if h.GetValue() > uint64(lim.maxHits) {
			return 0, true, nil
		}
		return int64(h.GetValue()), false, nil
	}
	if reqOver {
		return 0, true, nil
	}
	return cost, false, nil
}

// overrideLimit applies a limit sent by Envoy instead of the configured
// one (a fixed window of requests_per_unit per unit × unit_multiplier).
func overrideLimit(i int, domain string, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride, dp *descPlan) error {
	unit := rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	length, ok := unitLength(unit)
	if !ok || unit == rlspb.RateLimitResponse_RateLimit_WEEK {
		return invalidRequest(RejectLimitOverride, "descriptor %d: limit override unit %s is not supported (want SECOND, MINUTE, HOUR or DAY)", i, overrideUnitName(o.GetUnit()))
	}
	mult := int64(1)
	if m := o.GetUnitMultiplier(); m != nil {
		mult = int64(m.GetValue())
		if mult < 1 || time.Duration(mult) > floodgate.MaxWindow/length {
			return invalidRequest(RejectLimitOverride, "descriptor %d: limit override unit_multiplier %d out of range 1..%d", i, mult, int64(floodgate.MaxWindow/length))
		}
	}
	window := time.Duration(mult) * length
	rpu := o.GetRequestsPerUnit()
	dp.limit = &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit}
	if mult > 1 {
		dp.limit.UnitMultiplier = wrapperspb.UInt32(uint32(mult))
	}
	if rpu == 0 {
		dp.denies = true
		return nil
	}
	dp.override = floodgate.Policy{Name: overridePolicyName(domain, window), Algorithm: floodgate.FixedWindow, Limit: int64(rpu), Window: window}
	if err := dp.override.Validate(); err != nil {
		return invalidRequest(RejectLimitOverride, "descriptor %d: limit override: %v", i, err)
	}
	return nil
}

// overrideUnitName names a limit override's unit in a message: by its name
// in the override's enum (envoy.type.v3.RateLimitUnit), or else by its
// name in current_limit's enum with its number ("WEEK (7)": the override's
// enum has no WEEK), or else by its number.
func overrideUnitName(u typev3.RateLimitUnit) string {
	if name, ok := typev3.RateLimitUnit_name[int32(u)]; ok {
		return name
	}
	if name, ok := rlspb.RateLimitResponse_RateLimit_Unit_name[int32(u)]; ok {
		return name + " (" + strconv.Itoa(int(u)) + ")"
	}
	return strconv.Itoa(int(u))
}

// match walks the domain's tree along entries and returns the rule of the
// node reached by the last entry, or nil (as envoyproxy/ratelimit does, a
// rule applies only when the request's depth equals the node's).
func (d *domain) match(entries []*ratelimitv3.RateLimitDescriptor_Entry) *Rule {
	n := d.root
	for _, e := range entries {
		if n = n.child(e.GetKey(), e.GetValue()); n == nil {
			return nil
		}
	}
	return n.rule
}

// applyReplaces drops the named rules that another matched rule
// replaces: each is then answered as one that matched nothing (OK, no
// current_limit, 0 remaining). An unlimited rule is never dropped, as
// envoyproxy/ratelimit sets its unlimited descriptors aside before it
// drops the replaced ones: it stays OK with the maximum remaining. An
// unlimited rule's own replaces apply.
func applyReplaces(p *plan) {
	var replaced map[string]bool
	for _, dp := range p.descs {
		if dp.rule == nil {
			continue
		}
		for _, name := range dp.rule.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
	}
	if replaced == nil {
		return
	}
	for i := range p.descs {
		dp := &p.descs[i]
		if dp.rule != nil && !dp.unlimited && dp.rule.Name != "" && replaced[dp.rule.Name] {
			p.descs[i] = descPlan{layer: -1}
		}
	}
}

// currentLimit is the current_limit reported for r, built once by the
// parser (newCurrentLimit) and shared by every answer.
func (r *Rule) currentLimit() *rlspb.RateLimitResponse_RateLimit {
	if r.limitPB != nil {
		return r.limitPB
	}
	return newCurrentLimit(r)
}

// newCurrentLimit builds the current_limit reported for a rule.
func newCurrentLimit(r *Rule) *rlspb.RateLimitResponse_RateLimit {
	l := &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
	if r.UnitMultiplier > 1 {
		l.UnitMultiplier = wrapperspb.UInt32(r.UnitMultiplier)
	}
	return l
}
