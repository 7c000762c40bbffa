package floodgate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestNewRefusesZeroStore: New refuses a store's zero value, which cannot
// decide. It was accepted, and the first Allow panicked ("maphash: use of
// uninitialized Seed" for the zero memstore.Store, a nil dereference for
// the others).
func TestNewRefusesZeroStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store floodgate.Store
		want  error
	}{
		{"memstore", &memstore.Store{}, floodgate.ErrInvalidPolicy},
		{"redisstore", &redisstore.Store{}, floodgate.ErrInvalidPolicy},
		{"fallback", &fallback.Store{}, fallback.ErrInvalidOptions},
	} {
		l, err := floodgate.New(tc.store, floodgate.Options{})
		if !errors.Is(err, tc.want) || l != nil {
			t.Errorf("New(zero %s) = %v, %v; want an error wrapping %v", tc.name, l, err, tc.want)
		}
		// It said "floodgate: New: floodgate: invalid policy: memstore: …".
		if err != nil && strings.Count(err.Error(), "floodgate:") > 1 {
			t.Errorf("New(zero %s): %q repeats its prefix", tc.name, err)
		}
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := floodgate.New(st, floodgate.Options{}); err != nil {
		t.Fatalf("New(memstore.New's store): %v", err)
	}
}
