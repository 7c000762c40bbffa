package config_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
)

// TestMaxDelayZero: max_delay 0 (0, 0s, 0ms) is accepted, the same as
// leaving it out (a gcra layer that does not shape), and a tier may set
// it to turn off its layer's shaping; a negative one is refused with
// max_delay's range. A walk found `max_delay: 0s` refused as `duration
// "0s" must be positive`, while the range error said 0s..312749h58m26s.
func TestMaxDelayZero(t *testing.T) {
	for _, v := range []string{"0", "0s", "0ms"} {
		doc := "version: 1\ntiers: [free, pro]\ndefault_tier: free\npolicies:\n  - name: p\n    tier_dimension: user\n    layers:\n" +
			"      - {name: l, dimension: user, algorithm: gcra, limit: 10, window: 1s, max_delay: " + v + "}\n" +
			"      - {name: m, dimension: user, algorithm: gcra, limit: 10, window: 1s, max_delay: 1s, tiers: {pro: {max_delay: " + v + "}}}\n" +
			"      - {name: n, dimension: user, algorithm: token_bucket, limit: 10, window: 1s, max_delay: " + v + "}\n"
		cfg, err := config.Parse([]byte(doc), "z.yaml")
		if err != nil {
			t.Fatalf("max_delay %s: %v", v, err)
		}
		p, _ := cfg.Policy("p")
		l, m, n := p.Layers[0], p.Layers[1], p.Layers[2]
		if d := l.Policy("free").MaxDelay; d != 0 {
			t.Errorf("max_delay %s: layer l MaxDelay %v, want 0", v, d)
		}
		if d := m.Policy("pro").MaxDelay; d != 0 {
			t.Errorf("tier max_delay %s: MaxDelay %v, want 0", v, d)
		}
		if d := m.Policy("free").MaxDelay; d != time.Second {
			t.Errorf("layer m's own max_delay: %v, want 1s", d)
		}
		if d := n.Policy("free").MaxDelay; d != 0 {
			t.Errorf("max_delay %s on token_bucket: MaxDelay %v, want 0", v, d)
		}
	}
	for _, v := range []string{"-1s", "-0.5ms"} {
		doc := "version: 1\npolicies:\n  - name: p\n    layers:\n      - {name: l, dimension: user, algorithm: gcra, limit: 10, window: 1s, max_delay: " + v + "}\n"
		_, err := config.Parse([]byte(doc), "z.yaml")
		want := `layer "l" of policy "p": max_delay ` + map[string]string{"-1s": "-1s", "-0.5ms": "-500µs"}[v] + ` out of range 0s..13031d5h58m26.842624s`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("max_delay %s: %v, want %s", v, err, want)
		}
	}
}

// TestSIGHUPEnvoyLinesDocumented: the lines docs/configuration.md gives
// for a SIGHUP's read of the --envoy-config files are the ones
// config/envoy.go logs. The doc said they were the --config lines with
// "Envoy descriptor configuration" in front, which gave "Envoy descriptor
// configuration source holds the active configuration again" for a line
// that has no "source" (a re-walk).
func TestSIGHUPEnvoyLinesDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, bullet, ok := strings.Cut(string(raw), "* `SIGHUP` makes `floodgate serve`")
	bullet, _, _ = strings.Cut(bullet, "\n* ")
	if !ok {
		t.Fatal("docs/configuration.md has no SIGHUP bullet")
	}
	bullet = strings.Join(strings.Fields(bullet), " ")
	src, err := os.ReadFile("envoy.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"Envoy descriptor configuration applied",
		"Envoy descriptor configuration rejected; keeping the last good one",
		"Envoy descriptor configuration unchanged",
		"Envoy descriptor configuration holds the active configuration again",
		"Envoy descriptor configuration unreadable; keeping the last good one",
	} {
		if !strings.Contains(string(src), `"`+line+`"`) {
			t.Errorf("config/envoy.go does not log %q", line)
		}
		if !strings.Contains(bullet, "`"+line+"`") {
			t.Errorf("the SIGHUP bullet of docs/configuration.md does not give the line %q", line)
		}
	}
	if strings.Contains(bullet, "the same lines") {
		t.Errorf("the SIGHUP bullet still says the Envoy lines are \"the same lines\" prefixed")
	}
}
