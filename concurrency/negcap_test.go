package concurrency

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// TestNegativeMaxLeasesIsNamed: a negative MaxLeases is refused naming it
// ("max leases -1"), not the internal map's "max units".
func TestNegativeMaxLeasesIsNamed(t *testing.T) {
	_, err := NewMemoryStore(MemoryOptions{MaxLeases: -1})
	if !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), "max leases -1 is negative") {
		t.Fatalf("got %v, want ErrInvalidPolicy naming max leases", err)
	}
}
