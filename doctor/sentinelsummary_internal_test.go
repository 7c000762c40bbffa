package doctor

import "testing"

// TestSentinelsWarnedSummaryAgrees: the summary's verb agrees with the
// count of instances it speaks of, not with all the instances read
// ("1 of 3 instances find" read wrong, and "1 of 1 instance finds" was
// the only agreeing case).
func TestSentinelsWarnedSummaryAgrees(t *testing.T) {
	for _, c := range []struct {
		warned, unknown, n int
		want               string
	}{
		{1, 1, 1, "1 of 1 instance finds a majority of its sentinels"},
		{1, 1, 3, "1 of 3 instances finds a majority of its sentinels"},
		{2, 2, 3, "2 of 3 instances find a majority of their sentinels"},
		{1, 0, 3, "1 of 3 instances has a sentinels warning"},
		{2, 0, 2, "2 of 2 instances have a sentinels warning"},
	} {
		got := sentinelsWarnedSummary(c.warned, c.unknown, c.n)
		if len(got) < len(c.want) || got[:len(c.want)] != c.want {
			t.Errorf("sentinelsWarnedSummary(%d, %d, %d) = %q, want it to begin %q", c.warned, c.unknown, c.n, got, c.want)
		}
	}
}
