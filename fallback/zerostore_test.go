package fallback_test

import (
	"errors"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestNewRefusesZeroStores: New refuses a zero memstore.Store or
// redisstore.Store as its primary or local store. It accepted them, and
// the first decision panicked.
func TestNewRefusesZeroStores(t *testing.T) {
	good, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		primary, local floodgate.Store
	}{
		{"zero memstore local", good, &memstore.Store{}},
		{"zero memstore primary", &memstore.Store{}, good},
		{"zero redisstore primary", &redisstore.Store{}, good},
	} {
		s, err := fallback.New(tc.primary, tc.local, fallback.Options{})
		if !errors.Is(err, fallback.ErrInvalidOptions) || !errors.Is(err, floodgate.ErrInvalidPolicy) || s != nil {
			t.Errorf("%s: New = %v, %v; want an error wrapping ErrInvalidOptions and floodgate.ErrInvalidPolicy", tc.name, s, err)
		}
	}
}
