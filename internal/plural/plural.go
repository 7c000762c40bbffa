// Package plural writes counts in English: "1 policy", "2 policies".
package plural

import "strconv"

// Integer is the integer types Count takes.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Number is the types Word takes: integers and floats.
type Number interface {
	Integer | ~float32 | ~float64
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

// Word returns one when n is 1 and many otherwise, without the count: the
// word that agrees with a count written elsewhere in the sentence, as in
// "3 keys under the prefix " + Word(3, "has", "have") + " no TTL". A
// float n is compared as it is: round it first when it is printed
// rounded.
func Word[N Number](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
