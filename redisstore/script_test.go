package redisstore

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
)

// TestScriptConstants checks that the bounds written into decide.lua are
// floodgate's.
func TestScriptConstants(t *testing.T) {
	for name, want := range map[string]int64{
		"MAX_LAYERS":    floodgate.MaxLayers,
		"MAX_NOW":       maxNow,
		"MAX_LIMIT":     floodgate.MaxLimit,
		"MAX_LOG_LIMIT": floodgate.MaxSlidingLogLimit,
		"MIN_TTL":       1000,
		"TTL_SLACK":     algo.TTLSlack.Microseconds(),
		"QUOTA_GRACE":   algo.QuotaGrace.Microseconds(),
		"MAX_SPAN":      1 << 50,
		"MAX_STATE":     1 << 53,
	} {
		m := regexp.MustCompile(`local ` + name + ` = (\d+)`).FindStringSubmatch(source)
		if m == nil {
			t.Errorf("%s not found in the script", name)
			continue
		}
		if got, _ := strconv.ParseInt(m[1], 10, 64); got != want {
			t.Errorf("%s = %d in the script, want %d", name, got, want)
		}
	}
	m := regexp.MustCompile(`local MIN_WINDOW, MAX_WINDOW = (\d+), (\d+)`).FindStringSubmatch(source)
	if m == nil || m[1] != strconv.FormatInt(floodgate.MinWindow.Microseconds(), 10) || m[2] != strconv.FormatInt(floodgate.MaxWindow.Microseconds(), 10) {
		t.Errorf("window bounds in the script %v, want %v..%v", m, floodgate.MinWindow, floodgate.MaxWindow)
	}
	if script.Source() != source {
		t.Error("the Store's script does not run the concatenated source")
	}
	if sha := script.SHA(); len(sha) != 40 {
		t.Errorf("script SHA %q, want 40 hex digits", sha)
	}
}
