package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power-of-two range of
// values is split into 2^(subBits-1) buckets, so a recorded value is known
// to within 1/128 (0.8%).
const subBits = 8

// buckets is enough for every non-negative int64.
const buckets = (64-subBits+1)<<(subBits-1) + 1<<(subBits-1)

// Histogram records durations in log-linear buckets, as HDR histograms
// do: constant memory (about 60 KB), O(1) Record, and quantiles accurate
// to 0.8% at any magnitude from nanoseconds to hours. The zero value is
// empty and ready to use. A Histogram is not safe for concurrent use:
// record into one per goroutine and Merge them.
type Histogram struct {
	counts   [buckets]uint64
	n        uint64
	min, max int64
	sum      float64
}

// index returns the bucket of v ≥ 0: values below 2^subBits have their
// own bucket; above, the bucket keeps v's top subBits bits.
func index(v int64) int {
	u := uint64(v)
	if u < 1<<subBits {
		return int(u)
	}
	shift := bits.Len64(u) - subBits
	return shift<<(subBits-1) + int(u>>uint(shift))
}

// upper returns the largest value that falls in bucket i.
func upper(i int) int64 {
	if i < 1<<subBits {
		return int64(i)
	}
	shift := i>>(subBits-1) - 1
	mantissa := int64(i - shift<<(subBits-1))
	if mantissa+1 > math.MaxInt64>>uint(shift) {
		return math.MaxInt64
	}
	return (mantissa+1)<<uint(shift) - 1
}

// Record adds one duration; negative ones count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[index(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min returns the smallest value recorded, or 0.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest value recorded, or 0.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the average of the values recorded, or 0.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value below or at which a fraction q (0..1) of the
// recorded values fall, e.g. Quantile(0.99) is the p99: the upper edge of
// the bucket holding it, never above Max. It returns 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(max(upper(i), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
