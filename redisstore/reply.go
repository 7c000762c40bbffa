package redisstore

import (
	"fmt"

	"github.com/floodgate-rl/floodgate"
)

// replyWidth is the number of integers the script returns per layer:
// allowed, remaining, resetAt µs, retry µs, delay µs, reason.
const replyWidth = 6

// decodeReply checks the script's reply and fills out from it, one Result
// per layer (the limit comes from the layer's policy). Any unexpected type,
// length or value is an error wrapping floodgate.ErrBadReply; out may then
// be partly filled.
func decodeReply(val any, layers []floodgate.Layer, out []floodgate.Result) error {
	arr, ok := val.([]any)
	if !ok {
		return fmt.Errorf("%w: got %T, want an array", floodgate.ErrBadReply, val)
	}
	if len(arr) != replyWidth*len(layers) || len(out) != len(layers) {
		return fmt.Errorf("%w: %d values for %d layers, want %d", floodgate.ErrBadReply, len(arr), len(layers), replyWidth*len(layers))
	}
	var v [replyWidth]int64
	for i := range layers {
		for j := range v {
			x, ok := arr[replyWidth*i+j].(int64)
			if !ok {
				return fmt.Errorf("%w: layer %d value %d is %T, want an integer", floodgate.ErrBadReply, i, j, arr[replyWidth*i+j])
			}
			v[j] = x
		}
		allowed, remaining, resetAt, retry, delay, reason := v[0], v[1], v[2], v[3], v[4], v[5]
		switch {
		case allowed != 0 && allowed != 1,
			reason < int64(floodgate.ReasonNone) || reason > int64(floodgate.ReasonCostExceedsLimit),
			(allowed == 1) != (reason == int64(floodgate.ReasonNone)),
			retry < 0, delay < 0, resetAt < 0:
			return fmt.Errorf("%w: layer %d: inconsistent values %v", floodgate.ErrBadReply, i, v)
		}
		out[i] = floodgate.ResultFromMicros(allowed == 1, layers[i].Policy.Limit, remaining, resetAt, retry, delay, floodgate.Reason(reason))
	}
	return nil
}
