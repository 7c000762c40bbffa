package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// TestResetFailureSaysWhatWasDeleted: the 503 of a failed reset says how
// many keys were deleted and whether the failing deletion may have been
// applied, from the *ResetError and its classification.
func TestResetFailureSaysWhatWasDeleted(t *testing.T) {
	unsent := fmt.Errorf("%w: redis: dial tcp: connection refused", floodgate.ErrStoreUnavailable)
	sent := fmt.Errorf("%w: redis: i/o timeout", floodgate.ErrIndeterminate)
	for _, c := range []struct {
		err     error
		earlier bool
		want    string
	}{
		{&ResetError{0, unsent}, false, "resetting (nothing was deleted)"},
		{&ResetError{0, sent}, false, "resetting (the first key's deletion was sent and may have been applied, no other was sent; retrying is harmless)"},
		{&ResetError{1, unsent}, false, "resetting (1 of the 3 keys was deleted, not the others; retrying is harmless)"},
		{&ResetError{2, sent}, false, "resetting (2 of the 3 keys were deleted, and the deletion of key 3 was sent and may have been applied; retrying is harmless)"},
		{&ResetError{0, unsent}, true, "resetting (nothing was deleted by the store that failed; the stores before it were reset; retrying is harmless)"},
		{errors.New("some other store"), false, "resetting (some of the keys may have been deleted; retrying is harmless)"},
	} {
		if got := resetFailure(c.err, 3, c.earlier); got != c.want {
			t.Errorf("resetFailure(%v, earlier %v) = %q, want %q", c.err, c.earlier, got, c.want)
		}
	}
}
