package loadgen

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	values := []int64{0, 1, 255, 256, 257, 258, 1000, 1 << 20, 123456789, math.MaxInt64 / 3, math.MaxInt64}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		values = append(values, rng.Int64()>>uint(rng.IntN(63)))
	}
	for _, v := range values {
		i := index(v)
		if i < 0 || i >= buckets {
			t.Fatalf("index(%d) = %d outside 0..%d", v, i, buckets)
		}
		hi := upper(i)
		lo := int64(0)
		if i > 0 {
			lo = upper(i-1) + 1
		}
		if v < lo || v > hi {
			t.Fatalf("%d in bucket %d = [%d, %d]", v, i, lo, hi)
		}
		if width := float64(hi - lo); width > float64(lo)/128+1 {
			t.Fatalf("bucket %d = [%d, %d] wider than 1/128 of its start", i, lo, hi)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var a, b Histogram
	if a.Quantile(0.5) != 0 || a.Mean() != 0 || a.Max() != 0 {
		t.Fatal("empty histogram is not zero")
	}
	// 1..1000 µs, split over two histograms and merged.
	for i := 1; i <= 1000; i++ {
		h := &a
		if i%2 == 0 {
			h = &b
		}
		h.Record(time.Duration(i) * time.Microsecond)
	}
	a.Merge(&b)
	tests := []struct {
		q    float64
		want time.Duration
	}{{0, time.Microsecond}, {0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}, {1, 1000 * time.Microsecond}}
	for _, tt := range tests {
		got := a.Quantile(tt.q)
		if got < tt.want || float64(got-tt.want) > float64(tt.want)/128 {
			t.Errorf("Quantile(%v) = %v, want %v within 0.8%%", tt.q, got, tt.want)
		}
	}
	if a.Count() != 1000 || a.Min() != time.Microsecond || a.Max() != time.Millisecond {
		t.Errorf("count %d min %v max %v", a.Count(), a.Min(), a.Max())
	}
	if got, want := a.Mean(), 500500*time.Nanosecond; got != want {
		t.Errorf("mean %v, want %v", got, want)
	}
	a.Record(-time.Second)
	if a.Min() != 0 {
		t.Errorf("negative duration recorded as %v, want 0", a.Min())
	}
}
