package config

import (
	"fmt"
	"slices"

	"github.com/floodgate-rl/floodgate"
)

// Warnings returns what is valid in c but likely not what its author
// meant, one sentence each: a tier_dimension without per-tier limits, a
// tier that changes a layer's window, a bucket rate that rounding makes
// more than 1% faster than written. floodgate config validate prints
// them, and a Reloader logs them when it applies c.
func (c *Config) Warnings() []string {
	return slices.Concat(tierDimensionWarnings(c), tierWindowWarnings(c), rateRoundingWarnings(c))
}

// tierDimensionWarnings returns a warning for each policy naming a
// tier_dimension while none of its layers has per-tier limits: it has no
// effect, every decision using (and answering) the default tier, so an
// identity assigned another one looks unapplied.
func tierDimensionWarnings(c *Config) []string {
	var out []string
	for _, p := range c.Policies() {
		if p.TierDimension != "" && !p.Tiered() {
			out = append(out, fmt.Sprintf("policy %q has tier_dimension %q but no layer with per-tier limits (tiers): its decisions all use the default tier %q, whatever tier is assigned; give a layer tiers, or drop tier_dimension",
				p.Name, p.TierDimension, c.DefaultTier()))
		}
	}
	return out
}

// tierWindowWarnings returns a warning for each layer whose tier sets
// another window than the default tier's: every tier of a layer shares
// its state, so moving an identity between such tiers is a window change
// (docs/configuration.md, Identities and keys), which a fixed_window or
// sliding_window layer may count from zero.
func tierWindowWarnings(c *Config) []string {
	var out []string
	def := c.DefaultTier()
	for _, p := range c.Policies() {
		for _, l := range p.Layers {
			base := l.Policy(def)
			for _, t := range c.Tiers() {
				pt := l.Policy(t)
				if t == def || pt.Window == base.Window {
					continue
				}
				what := "its state is read at the other rate"
				if a := pt.Algorithm; a == floodgate.FixedWindow || a == floodgate.SlidingWindow {
					what = "it may start a fresh count, up to one more limit per change"
				}
				out = append(out, fmt.Sprintf("layer %q of policy %q: tier %q sets window %s, the default tier %q has %s: the tiers share the layer's state, so moving an identity between them is a window change (%s, %s); override limit or burst only to keep the state as it is",
					l.Name, p.Name, t, pt.Window, def, base.Window, pt.Algorithm, what))
			}
		}
	}
	return out
}

// rateRoundingWarnings returns a warning for each token_bucket or gcra
// layer (and each tier that gives it another rate) whose interval,
// window/limit rounded down to whole microseconds, admits more than 1%
// over its limit per window (floodgate.Policy.Interval): an outside walk
// found 300,000 per second admitting 333,333, and 501 per millisecond
// 1,000, with nothing saying so.
func rateRoundingWarnings(c *Config) []string {
	var out []string
	def := c.DefaultTier()
	for _, p := range c.Policies() {
		for _, l := range p.Layers {
			base := l.Policy(def)
			for _, t := range c.Tiers() {
				pt := l.Policy(t)
				iv := pt.Interval()
				if iv <= 0 || t != def && pt.Limit == base.Limit && pt.Window == base.Window {
					continue
				}
				admits := pt.Window.Microseconds() / iv.Microseconds()
				over := float64(admits)/float64(pt.Limit) - 1
				if over <= 0.01 {
					continue
				}
				where := fmt.Sprintf("layer %q of policy %q", l.Name, p.Name)
				if t != def {
					where += fmt.Sprintf(" (tier %q)", t)
				}
				out = append(out, fmt.Sprintf("%s: %s %d per %s refills one unit every %v (window/limit rounded down to whole microseconds), so it admits up to %d per %s, %.1f%% more than its limit; give a window/limit that is a whole number of microseconds, or of 100µs or more to stay within 1%%",
					where, pt.Algorithm, pt.Limit, pt.Window, iv, admits, pt.Window, 100*over))
			}
		}
	}
	return out
}
