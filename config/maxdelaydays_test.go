package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
)

// TestMaxDelayInDays: a gcra max_delay written in days is read up to
// floodgate.MaxMaxDelay (13031 whole days), in a layer and in a tier;
// beyond, it is refused with max_delay's range in days, as window, hold
// and lease_ttl state theirs. An outside walk found max_delay: 10000d
// and 12000d refused as `duration "10000d" is too long` (the day parser
// read four digits at most) while 288000h, the same as 12000d, was
// accepted, and 13032d's range read 0s..312749h58m26.842624s.
func TestMaxDelayInDays(t *testing.T) {
	doc := func(v string) string {
		return "version: 1\ntiers: [free, pro]\ndefault_tier: free\npolicies:\n  - name: gcmd\n    tier_dimension: user\n    layers:\n" +
			"      - {name: l, dimension: user, algorithm: gcra, limit: 1, window: 400d, burst: 1, max_delay: " + v + ", tiers: {pro: {max_delay: " + v + "}}}\n"
	}
	for _, v := range []string{"10000d", "12000d", "13031d"} {
		cfg, err := config.Parse([]byte(doc(v)), "d.yaml")
		if err != nil {
			t.Fatalf("max_delay %s: %v", v, err)
		}
		want, _ := config.ParseDuration(v)
		p, _ := cfg.Policy("gcmd")
		for _, tier := range []string{"free", "pro"} {
			if got := p.Layers[0].Policy(tier).MaxDelay; got != want {
				t.Errorf("max_delay %s, tier %s: MaxDelay %v, want %v", v, tier, got, want)
			}
		}
	}
	const rng = " out of range 0s..13031d5h58m26.842624s"
	for v, want := range map[string]string{
		"13032d":                `layer "l" of policy "gcmd": max_delay 13032d` + rng,
		"312768h":               `layer "l" of policy "gcmd": max_delay 13032d` + rng,
		"99999d":                `layer "l" of policy "gcmd": max_delay 99999d` + rng,
		"106752d":               `layer "l" of policy "gcmd" max_delay 106752d` + rng,
		"99999999999999999999d": `layer "l" of policy "gcmd" max_delay 99999999999999999999d` + rng,
	} {
		_, err := config.Parse([]byte(doc(v)), "d.yaml")
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "too long") {
			t.Errorf("max_delay %s: %v\nwant it to say %s", v, err, want)
		}
	}
	if floodgate.MaxMaxDelay != (1<<50)*time.Microsecond {
		t.Errorf("MaxMaxDelay %v, want 2^50µs", floodgate.MaxMaxDelay)
	}
}
