package closedloop

import (
	"strconv"
	"strings"
)

// ParseCounts parses a comma-separated list of caller counts such as
// "1,16,64", the form the benchmark commands' -concurrency flags take.
// Spaces around an entry are ignored. It checks only that every entry is
// an integer: whether a count is usable is for the run's configuration to
// say (Config.Validate).
func ParseCounts(s string) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		ns = append(ns, n)
	}
	return ns, nil
}
