// Package plural writes counts in English: "1 policy", "2 policies".
package plural

import "strconv"

// Integer is the integer types Count takes.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Count returns n followed by one when n is 1, by many otherwise: Count(1,
// "policy", "policies") is "1 policy", Count(0, "policy", "policies") "0
// policies". one and many may carry more words ("policy spans", "policies
// span") so that a verb agrees with the count.
func Count[N Integer](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	if n < 0 {
		return strconv.FormatInt(int64(n), 10) + " " + many
	}
	return strconv.FormatUint(uint64(n), 10) + " " + many
}
