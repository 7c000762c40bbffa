package luascript

import (
	"fmt"

	"github.com/floodgate-rl/floodgate"
)

// Ints decodes a script's reply into dst: the reply must be an array of
// exactly len(dst) integers. Otherwise Ints returns an error wrapping
// floodgate.ErrBadReply that says what came instead, and dst may be partly
// filled. Range checks on the values are the caller's.
func Ints(reply any, dst []int64) error {
	arr, ok := reply.([]any)
	if !ok {
		return fmt.Errorf("%w: got %T %v, want an array of %d integers", floodgate.ErrBadReply, reply, reply, len(dst))
	}
	if len(arr) != len(dst) {
		return fmt.Errorf("%w: got an array of %d values, want %d integers", floodgate.ErrBadReply, len(arr), len(dst))
	}
	for i, v := range arr {
		x, ok := v.(int64)
		if !ok {
			return fmt.Errorf("%w: value %d is %T %v, want an integer", floodgate.ErrBadReply, i, v, v)
		}
		dst[i] = x
	}
	return nil
}
