package envoyrls

import (
	"strings"
	"testing"
	"time"
)

// TestWindowInDays: a rate_limit's window takes whole days ("30d") as the
// policies' configuration does; docs/envoy.md allows windows up to 400
// days and the range error names "400d", which the parser used to refuse
// as a window. A negative or zero window is still refused.
func TestWindowInDays(t *testing.T) {
	doc := func(w string) []byte {
		return []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {window: " + w + ", requests_per_unit: 5}\n")
	}
	for w, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "400d": 400 * 24 * time.Hour, "36h": 36 * time.Hour} {
		cfg, err := ParseConfig(doc(w), "f.yaml")
		if err != nil {
			t.Fatalf("window %s: %v", w, err)
		}
		if rules := cfg.Rules(); len(rules) != 1 || rules[0].Policy.Window != want {
			t.Fatalf("window %s: rules %+v, want one with window %v", w, rules, want)
		}
	}
	for w, want := range map[string]string{"401d": "out of range", "99999d": "window 99999d out of range 1ms..400d", "106752d": "window 106752d out of range 1ms..400d", "0d": "window", "-1s": "window", "1x": "window"} {
		if _, err := ParseConfig(doc(w), "f.yaml"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("window %s: %v, want an error with %q", w, err, want)
		}
	}
}
