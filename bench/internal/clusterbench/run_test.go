package clusterbench

import (
	"strings"
	"testing"
	"time"
)

// TestMarkdown checks the per-round ratios and the ranges over rounds
// without a cluster.
func TestMarkdown(t *testing.T) {
	cfg := Config{Concurrency: []int{64}, Rounds: 2, Keys: 10, Duration: time.Second, Command: "go run . -cluster"}
	cells := []Cell{
		{ID: "redis_rate", Workers: 64, Round: 1, PerSecond: 1000, ClientUs: 20, RedisUs: 20},
		{ID: "fg_sw", Workers: 64, Round: 1, PerSecond: 3000, ClientUs: 5, RedisUs: 8},
		{ID: "redis_rate", Workers: 64, Round: 2, PerSecond: 2000, ClientUs: 22, RedisUs: 18},
		{ID: "fg_sw", Workers: 64, Round: 2, PerSecond: 5000, ClientUs: 6, RedisUs: 9},
	}
	md := Markdown(cfg, cells)
	for _, want := range []string{
		"| 1 | 64 | fg_sw | 3000 | 3.00× |",
		"| 2 | 64 | fg_sw | 5000 | 2.50× |",
		"| 64 | fg_sw | 3000–5000 | 2.50×–3.00× | 5.0–6.0 | 8.0–9.0 |",
		"| 64 | redis_rate | 1000–2000 | 1.00× |",
		"`go run . -cluster`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want string
	}{
		{nil, "–"},
		{[]float64{2}, "2.0"},
		{[]float64{2, 2.01}, "2.0"},
		{[]float64{3, 1, 2}, "1.0–3.0"},
	} {
		if got := span(tc.xs, "%.1f"); got != tc.want {
			t.Errorf("span(%v) = %q, want %q", tc.xs, got, tc.want)
		}
	}
}
