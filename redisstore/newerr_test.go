package redisstore

import (
	"errors"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestNewErrorsWrapInvalidPolicy: New's errors wrap
// floodgate.ErrInvalidPolicy, as errors.go says of every error of the
// module and as the other constructors' do; they wrapped nothing.
func TestNewErrorsWrapInvalidPolicy(t *testing.T) {
	var nilClient *redis.Client
	if _, err := New(nilClient, Options{}); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("New(nil) = %v, want ErrInvalidPolicy", err)
	}
	c := redistest.Start(t).Client(t)
	for _, opts := range []Options{{SlotCheck: 99}, {MaxBatch: -1}, {MaxInFlight: -1}, {Split: 99}, {StateFormat: 99},
		{Coalesce: 99}, {Coalesce: CoalesceOn, SlotCheck: SlotCheckOn}} {
		if _, err := New(c, opts); !errors.Is(err, floodgate.ErrInvalidPolicy) {
			t.Errorf("New(%+v) = %v, want ErrInvalidPolicy", opts, err)
		}
	}
}
