package quota

import (
	"errors"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// TestNewRefusesZeroStore: New refuses a store's zero value. It was
// accepted, and the first operation panicked (a nil dereference).
func TestNewRefusesZeroStore(t *testing.T) {
	p := Policy{Name: "zero", Limit: 10, Calendar: Calendar{Unit: Month}}
	for _, st := range []Store{&MemoryStore{}, &RedisStore{}} {
		q, err := New(st, p, Options{})
		if !errors.Is(err, floodgate.ErrInvalidPolicy) || q != nil {
			t.Errorf("New(zero %T) = %v, %v; want an error wrapping ErrInvalidPolicy", st, q, err)
		}
	}
}
