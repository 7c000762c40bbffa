package closedloop

import (
	"math/bits"
	"time"
)

// subBits sets the histogram's resolution: each power-of-two range of
// nanoseconds is split into 2^subBits equal buckets, so a recorded value is
// known to within 1/2^subBits (about 1.6%).
const subBits = 6

const (
	subCount = 1 << subBits
	// nBuckets covers 0 ns up to 2^63 ns.
	nBuckets = (64 - subBits + 1) * subCount
)

// Histogram counts latencies in log-linear buckets. The zero value is an
// empty histogram. It is not safe for concurrent use: give each goroutine
// its own and Merge them.
type Histogram struct {
	counts [nBuckets]uint64
	total  uint64
	max    time.Duration
}

// bucketOf returns the bucket index of v ≥ 0 nanoseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits // ≥ 1
	return e*subCount + int(v>>uint(e-1)) - subCount
}

// bucketUpper returns the largest value that falls into bucket i.
func bucketUpper(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	e := i / subCount
	m := uint64(i%subCount + subCount)
	return (m+1)<<uint(e-1) - 1
}

// Record adds one latency; negative values count as zero.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.total++
	if d > h.max {
		h.max = d
	}
}

// Count returns the number of recorded latencies.
func (h *Histogram) Count() uint64 { return h.total }

// Max returns the largest recorded latency.
func (h *Histogram) Max() time.Duration { return h.max }

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// Quantile returns the latency below or at which a fraction q (0..1) of the
// recorded latencies fall, as the upper edge of its bucket (never above
// Max). It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(q*float64(h.total) + 0.5)
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketUpper(i)), h.max)
		}
	}
	return h.max
}
