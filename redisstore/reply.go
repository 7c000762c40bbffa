package redisstore

import (
	"fmt"
	"math"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
)

// The general script's reply widths: per layer, the integers allowed,
// remaining, resetAt µs, retry µs, delay µs and reason, followed in reserve
// mode by the three numbers a release needs (undo); and, after a first
// integer (1: given back, 0: already released), four per layer for a
// release. The flat scripts (single-layer and layered) answer in
// compactWidth integers per layer: reason (or a per-request error code),
// remaining, resetAt µs, and the delay when admitted or the retry when
// not.
const (
	replyWidth   = 6
	undoWidth    = 3
	reserveWidth = replyWidth + undoWidth
	releaseWidth = 4
	compactWidth = 4
)

// decodeReply checks the script's reply and fills out from it, one Result
// per layer (the limit comes from the layer's policy). Any unexpected type,
// length or value is an error wrapping floodgate.ErrBadReply; out may then
// be partly filled.
func decodeReply(val any, layers []floodgate.Layer, out []floodgate.Result) error {
	return decodeResults(val, layers, out, nil)
}

// decodeResults decodes a decide reply (undo nil) or a reserve reply (undo
// with one entry per layer, filled with the numbers a release needs).
func decodeResults(val any, layers []floodgate.Layer, out []floodgate.Result, undo [][undoWidth]int64) error {
	arr, ok := val.([]any)
	if !ok {
		return fmt.Errorf("%w: got %T, want an array", floodgate.ErrBadReply, val)
	}
	vals := make([]int64, len(arr))
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return fmt.Errorf("%w: value %d is %T, want an integer", floodgate.ErrBadReply, i, x)
		}
		vals[i] = n
	}
	return decodeInts(vals, layers, out, undo)
}

// decodeInts is decodeResults for a reply already read as integers.
func decodeInts(vals []int64, layers []floodgate.Layer, out []floodgate.Result, undo [][undoWidth]int64) error {
	width := replyWidth
	if undo != nil {
		width = reserveWidth
	}
	if len(vals) != width*len(layers) || len(out) != len(layers) || (undo != nil && len(undo) != len(layers)) {
		return fmt.Errorf("%w: %d values for %d layers, want %d", floodgate.ErrBadReply, len(vals), len(layers), width*len(layers))
	}
	for i := range layers {
		v := vals[width*i : width*(i+1)]
		allowed, remaining, resetAt, retry, delay, reason := v[0], v[1], v[2], v[3], v[4], v[5]
		switch {
		case allowed != 0 && allowed != 1,
			reason < int64(floodgate.ReasonNone) || reason > int64(floodgate.ReasonCostExceedsLimit),
			(allowed == 1) != (reason == int64(floodgate.ReasonNone)),
			retry < 0, delay < 0, resetAt < 0,
			undo != nil && (v[6] < 0 || v[7] < 0 || v[8] < 0):
			return fmt.Errorf("%w: layer %d: inconsistent values %v", floodgate.ErrBadReply, i, v)
		}
		out[i] = algo.ResultFromMicros(allowed == 1, layers[i].Policy.Capacity(), remaining, resetAt, retry, delay, floodgate.Reason(reason))
		if undo != nil {
			undo[i] = [undoWidth]int64{v[6], v[7], v[8]}
		}
	}
	return nil
}

// decodeCompact is decodeInts for a flat script's reply (compactWidth
// integers per layer).
func decodeCompact(vals []int64, layers []floodgate.Layer, out []floodgate.Result) error {
	if len(vals) != compactWidth*len(layers) || len(out) != len(layers) {
		return fmt.Errorf("%w: %d values for %d layers, want %d", floodgate.ErrBadReply, len(vals), len(layers), compactWidth*len(layers))
	}
	for i := range layers {
		v := vals[compactWidth*i : compactWidth*(i+1)]
		reason, remaining, resetAt, wait := v[0], v[1], v[2], v[3]
		if reason < int64(floodgate.ReasonNone) || reason > int64(floodgate.ReasonCostExceedsLimit) || resetAt < 0 || wait < 0 {
			// A copy of v: formatting v itself would make every caller's
			// values escape (decodeLone's live on its stack).
			return fmt.Errorf("%w: layer %d: inconsistent values %v", floodgate.ErrBadReply, i, [compactWidth]int64(v))
		}
		allowed := reason == int64(floodgate.ReasonNone)
		var retry, delay int64
		if allowed {
			delay = wait
		} else {
			retry = wait
		}
		out[i] = algo.ResultFromMicros(allowed, layers[i].Policy.Capacity(), remaining, resetAt, retry, delay, floodgate.Reason(reason))
	}
	return nil
}

// decodeLone is decodeCompact for the reply to a lone request of a
// single-layer script (see fast_head.lua) or a lone decision of the
// layered script (fast_layers.lua): its compactWidth integers per layer
// packed in one string, each a little-endian double (struct's "d").
func decodeLone(reply string, layers []floodgate.Layer, out []floodgate.Result) error {
	m := compactWidth * len(layers)
	if len(reply) != 8*m || len(layers) > floodgate.MaxLayers {
		return fmt.Errorf("%w: a lone reply of %d bytes, want %d", floodgate.ErrBadReply, len(reply), 8*m)
	}
	var all [compactWidth * floodgate.MaxLayers]int64
	vals := all[:m]
	for i := range vals {
		x, ok := packedInt(reply, i)
		if !ok {
			return fmt.Errorf("%w: a lone reply's value %d is %v, want an integer", floodgate.ErrBadReply, i, x)
		}
		vals[i] = int64(x)
	}
	return decodeCompact(vals, layers, out)
}

// decodePacked reads a packed batch's reply (see fast_end.lua): its
// integers, compactWidth per request, each a little-endian double, into
// f.vals, which it returns, with badValue for one that is not an integer
// below 2^53. decodeBatch checks their number and fails the requests
// with a bad value.
func (f *batchFrame) decodePacked(reply string) ([]int64, error) {
	if len(reply)%8 != 0 {
		return nil, fmt.Errorf("%w: batch: a packed reply of %d bytes, not a multiple of 8", floodgate.ErrBadReply, len(reply))
	}
	n := len(reply) / 8
	if cap(f.vals) < n {
		f.vals = make([]int64, n)
	}
	f.vals = f.vals[:n]
	for i := range f.vals {
		x, ok := packedInt(reply, i)
		if !ok {
			// Only this value's request fails (decodeBatch): a state
			// with the right tag and length but numbers floodgate
			// never writes (a NaN, 1e300) is decided into nonsense,
			// and must not take the batch's other requests with it.
			f.vals[i] = badValue
			continue
		}
		f.vals[i] = int64(x)
	}
	return f.vals, nil
}

// badValue stands, in decodePacked's integers, for a value that is not
// an integer of magnitude below 2^53 (which no valid answer holds).
const badValue = math.MinInt64

// packedInt reads the i-th little-endian double of s (struct's "d"),
// and reports whether it is an integer of magnitude below 2^53 (NaN and
// infinities are not).
func packedInt(s string, i int) (float64, bool) {
	var u uint64 // read from the string itself: converting it to []byte would allocate
	for j := 8*i + 7; j >= 8*i; j-- {
		u = u<<8 | uint64(s[j])
	}
	x := math.Float64frombits(u)
	return x, x == math.Trunc(x) && math.Abs(x) < 1<<53 // false for NaN
}

// released is what a release reply says about one layer.
type released struct {
	back    int64 // what was given back (cost units; µs of TAT for GCRA)
	known   bool  // the key holds a floodgate state, and the standing below is its
	rem, at int64 // the standing after the release: remaining, resetAt µs
}

// decodeRelease checks a release reply for n layers and fills rel. It
// returns whether this call gave back (false: the release had already
// been done).
func decodeRelease(val any, rel []released) (bool, error) {
	arr, ok := val.([]any)
	if !ok {
		return false, fmt.Errorf("%w: release: got %T, want an array", floodgate.ErrBadReply, val)
	}
	if len(arr) != 1+releaseWidth*len(rel) {
		return false, fmt.Errorf("%w: release: %d values for %d layers, want %d", floodgate.ErrBadReply, len(arr), len(rel), 1+releaseWidth*len(rel))
	}
	var v [1 + releaseWidth*floodgate.MaxLayers]int64
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return false, fmt.Errorf("%w: release: value %d is %T, want an integer", floodgate.ErrBadReply, i, x)
		}
		v[i] = n
	}
	if v[0] != 0 && v[0] != 1 {
		return false, fmt.Errorf("%w: release: first value %d, want 0 or 1", floodgate.ErrBadReply, v[0])
	}
	for i := range rel {
		back, known, rem, at := v[1+releaseWidth*i], v[2+releaseWidth*i], v[3+releaseWidth*i], v[4+releaseWidth*i]
		if back < 0 || known != 0 && known != 1 || at < 0 || (v[0] == 0 && back != 0) {
			return false, fmt.Errorf("%w: release: layer %d: inconsistent values %v", floodgate.ErrBadReply, i, v[1+releaseWidth*i:1+releaseWidth*(i+1)])
		}
		rel[i] = released{back: back, known: known == 1, rem: rem, at: at}
	}
	return v[0] == 1, nil
}
