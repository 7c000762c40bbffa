package redisstore

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algo"
)

// TestDecodeReply feeds the reply decoder every wrong shape: each must be
// an ErrBadReply, never a panic.
func TestDecodeReply(t *testing.T) {
	p := floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Second}
	one := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
	two := []floodgate.Layer{one[0], {Policy: p, Key: "k2", Cost: 1}}
	ok := []any{int64(1), int64(9), int64(2_000_000), int64(0), int64(0), int64(0)}
	with := func(i int, v any) []any {
		r := append([]any(nil), ok...)
		r[i] = v
		return r
	}
	for _, tc := range []struct {
		name   string
		val    any
		layers []floodgate.Layer
	}{
		{"nil", nil, one},
		{"string", "OK", one},
		{"integer", int64(1), one},
		{"empty array", []any{}, one},
		{"short", ok[:5], one},
		{"long", append(append([]any(nil), ok...), int64(0)), one},
		{"one layer's worth for two", ok, two},
		{"string element", with(1, "9"), one},
		{"nil element", with(2, nil), one},
		{"nested array", with(3, []any{int64(1)}), one},
		{"float element", with(4, 1.5), one},
		{"allowed 2", with(0, int64(2)), one},
		{"allowed -1", with(0, int64(-1)), one},
		{"reason 3", with(5, int64(3)), one},
		{"reason -1", with(5, int64(-1)), one},
		{"allowed with a reason", with(5, int64(1)), one},
		{"denied without a reason", with(0, int64(0)), one},
		{"negative retry", with(3, int64(-1)), one},
		{"negative delay", with(4, int64(-5)), one},
		{"negative reset", with(2, int64(-5)), one},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]floodgate.Result, len(tc.layers))
			if err := decodeReply(tc.val, tc.layers, out); !errors.Is(err, floodgate.ErrBadReply) {
				t.Fatalf("got %v, want ErrBadReply", err)
			}
		})
	}
	out := make([]floodgate.Result, 1)
	if err := decodeReply(ok, one, out); err != nil {
		t.Fatal(err)
	}
	want := algo.ResultFromMicros(true, 10, 9, 2_000_000, 0, 0, floodgate.ReasonNone)
	if out[0] != want {
		t.Fatalf("got %+v, want %+v", out[0], want)
	}
}

// FuzzDecodeReply checks that no reply of integers, whatever their values
// and number, panics the decoder or yields a negative duration.
func FuzzDecodeReply(f *testing.F) {
	f.Add(int64(1), int64(9), int64(2_000_000), int64(0), int64(0), int64(0), uint8(6))
	f.Add(int64(0), int64(-3), int64(5), int64(7), int64(0), int64(1), uint8(6))
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g int64, n uint8) {
		vals := []any{a, b, c, d, e, g, a, b, c, d, e, g}
		p := floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Second}
		layers := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
		out := make([]floodgate.Result, 1)
		if err := decodeReply(vals[:int(n)%len(vals)], layers, out); err != nil {
			if !errors.Is(err, floodgate.ErrBadReply) {
				t.Fatalf("error %v does not wrap ErrBadReply", err)
			}
			return
		}
		if r := out[0]; r.RetryAfter < 0 || r.Delay < 0 || r.Remaining < 0 {
			t.Fatalf("decoded %+v", r)
		}
	})
}

// TestDecodeReserveAndRelease feeds the reserve and release decoders wrong
// shapes: each must be an ErrBadReply.
func TestDecodeReserveAndRelease(t *testing.T) {
	p := floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Second}
	one := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
	res := []any{int64(1), int64(9), int64(2_000_000), int64(0), int64(0), int64(0), int64(1_000_000), int64(0), int64(0)}
	undo := make([][undoWidth]int64, 1)
	out := make([]floodgate.Result, 1)
	if err := decodeResults(res, one, out, undo); err != nil || undo[0] != [undoWidth]int64{1_000_000, 0, 0} || out[0].Remaining != 9 {
		t.Fatalf("good reserve reply: %v, %v, %+v", err, undo, out)
	}
	for name, v := range map[string][]any{
		"decide width":  res[:6],
		"negative undo": append(append([]any(nil), res[:8]...), int64(-1)),
		"string undo":   append(append([]any(nil), res[:8]...), "0"),
	} {
		if err := decodeResults(v, one, out, undo); !errors.Is(err, floodgate.ErrBadReply) {
			t.Errorf("reserve %s: got %v, want ErrBadReply", name, err)
		}
	}

	rel := make([]released, 1)
	if applied, err := decodeRelease([]any{int64(1), int64(1), int64(1), int64(10), int64(2_000_000)}, rel); err != nil || !applied || rel[0] != (released{back: 1, known: true, rem: 10, at: 2_000_000}) {
		t.Fatalf("good release reply: %v, %v, %+v", applied, err, rel)
	}
	for name, v := range map[string]any{
		"not an array":           "OK",
		"short":                  []any{int64(1), int64(1), int64(1), int64(10)},
		"first value 2":          []any{int64(2), int64(1), int64(1), int64(10), int64(0)},
		"given back twice":       []any{int64(0), int64(1), int64(1), int64(10), int64(0)},
		"negative given back":    []any{int64(1), int64(-1), int64(1), int64(10), int64(0)},
		"known 2":                []any{int64(1), int64(1), int64(2), int64(10), int64(0)},
		"negative reset":         []any{int64(1), int64(1), int64(1), int64(10), int64(-1)},
		"string element":         []any{int64(1), "1", int64(1), int64(10), int64(0)},
		"one layer's worth of 2": []any{int64(1), int64(1), int64(1), int64(10), int64(0), int64(0)},
	} {
		if _, err := decodeRelease(v, rel); !errors.Is(err, floodgate.ErrBadReply) {
			t.Errorf("release %s: got %v, want ErrBadReply", name, err)
		}
	}
}

// TestDecodeCompact checks the flat scripts' four-integer reply: the wait
// is the delay of an admitted layer and the retry of a denied one, and
// every wrong shape or value is an ErrBadReply.
func TestDecodeCompact(t *testing.T) {
	p := floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Second}
	one := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
	two := []floodgate.Layer{one[0], {Policy: p, Key: "k2", Cost: 1}}
	out := make([]floodgate.Result, 2)
	if err := decodeCompact([]int64{0, 9, 2_000_000, 300, 1, 0, 3_000_000, 70}, two, out); err != nil {
		t.Fatal(err)
	}
	for i, want := range []floodgate.Result{
		algo.ResultFromMicros(true, 10, 9, 2_000_000, 0, 300, floodgate.ReasonNone),
		algo.ResultFromMicros(false, 10, 0, 3_000_000, 70, 0, floodgate.ReasonLimited),
	} {
		if g := out[i]; g.Allowed != want.Allowed || g.Remaining != want.Remaining || !g.ResetAt.Equal(want.ResetAt) ||
			g.RetryAfter != want.RetryAfter || g.Delay != want.Delay || g.Reason != want.Reason || g.Limit != 10 {
			t.Errorf("layer %d: got %+v, want %+v", i, g, want)
		}
	}
	for name, vals := range map[string][]int64{
		"empty":                        {},
		"short":                        {0, 9, 2_000_000},
		"long":                         {0, 9, 2_000_000, 0, 0},
		"reason 3":                     {3, 9, 2_000_000, 0},
		"error code -1 (not a reason)": {-1, 0, 0, 0},
		"negative reset":               {0, 9, -1, 0},
		"negative wait":                {1, 0, 2_000_000, -5},
	} {
		if err := decodeCompact(vals, one, out[:1]); !errors.Is(err, floodgate.ErrBadReply) {
			t.Errorf("%s: got %v, want ErrBadReply", name, err)
		}
	}
}

// TestDecodeLone feeds the lone reply decoder a good reply and every
// wrong shape: each bad one must be an ErrBadReply, never a panic.
func TestDecodeLone(t *testing.T) {
	p := floodgate.Policy{Name: "p", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Second}
	one := []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}
	out := make([]floodgate.Result, 1)
	pack := func(v ...float64) string {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return string(b)
	}
	if err := decodeLone(pack(0, 9, 1<<52, 300), one, out); err != nil {
		t.Fatal(err)
	}
	want := algo.ResultFromMicros(true, 10, 9, 1<<52, 0, 300, floodgate.ReasonNone)
	if g := out[0]; g.Allowed != want.Allowed || g.Remaining != want.Remaining || !g.ResetAt.Equal(want.ResetAt) ||
		g.RetryAfter != want.RetryAfter || g.Delay != want.Delay || g.Reason != want.Reason || g.Limit != 10 {
		t.Errorf("got %+v, want %+v", g, want)
	}
	if err := decodeLone(pack(1, -3, 2_000_000, 70), one, out); err != nil || out[0].Allowed || out[0].RetryAfter != 70*time.Microsecond {
		t.Errorf("denied, negative remaining: %+v, %v", out[0], err)
	}
	for name, reply := range map[string]string{
		"empty":          "",
		"short":          pack(0, 9, 2_000_000),
		"long":           pack(0, 9, 2_000_000, 0, 0),
		"one byte short": pack(0, 9, 2_000_000, 0)[1:],
		"text":           "0 9 2000000 0",
		"fraction":       pack(0, 9.5, 2_000_000, 0),
		"nan":            pack(0, math.NaN(), 2_000_000, 0),
		"inf":            pack(0, 9, math.Inf(1), 0),
		"2^53":           pack(0, 9, 1<<53, 0),
		"reason 3":       pack(3, 9, 2_000_000, 0),
		"error code -1":  pack(-1, 0, 0, 0),
		"negative reset": pack(0, 9, -1, 0),
		"negative wait":  pack(1, 0, 2_000_000, -5),
	} {
		if err := decodeLone(reply, one, out); !errors.Is(err, floodgate.ErrBadReply) {
			t.Errorf("%s: got %v, want ErrBadReply", name, err)
		}
	}
}
