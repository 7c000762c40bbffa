package config_test

import (
	"strings"
	"testing"
)

// TestReloaderLogsWarnings: a configuration applied with something
// validate warns of (here a token_bucket rate that rounding makes 11%
// faster) logs the warning at WARN, so that an instance that never met
// config validate says it too; a configuration without one logs none.
func TestReloaderLogsWarnings(t *testing.T) {
	_, r, _, logs := newLoggedReloader(t, doc("1", 10))
	fast := strings.Replace(strings.Replace(doc("2", 300000), "sliding_window", "token_bucket", 1), "window: 1m", "window: 1s", 1)
	if _, err := r.Apply([]byte(fast), "fast.yaml"); err != nil {
		t.Fatal(err)
	}
	want := `level=WARN msg="configuration warning: layer \"u\" of policy \"api\": token_bucket 300000 per 1s refills one unit every 3µs`
	if got := logs.String(); !strings.Contains(got, want) || !strings.Contains(got, "source=fast.yaml config_version=2") {
		t.Fatalf("log lacks %q with its source and version:\n%s", want, got)
	}
	n := strings.Count(logs.String(), "configuration warning")
	if _, err := r.Apply([]byte(doc("3", 20)), "plain.yaml"); err != nil {
		t.Fatal(err)
	}
	if m := strings.Count(logs.String(), "configuration warning"); m != n {
		t.Fatalf("a configuration without warnings logged %d more:\n%s", m-n, logs.String())
	}
}
