package memstore_test

import (
	"errors"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestNewErrorsWrapInvalidPolicy: New's errors wrap
// floodgate.ErrInvalidPolicy, as errors.go says of every error of the
// module and as the other constructors' do; they wrapped nothing.
func TestNewErrorsWrapInvalidPolicy(t *testing.T) {
	for _, opts := range []memstore.Options{{Shards: -1}, {Shards: 1<<16 + 1}, {MaxKeys: -1}} {
		if _, err := memstore.New(opts); !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("New(%+v) = %v, want ErrInvalidPolicy", opts, err)
		}
	}
}
