package quota

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// TestNegativeMaxRecordsIsNamed: a negative MaxRecords is refused naming
// it ("max records -1"), not the internal map's "max units".
func TestNegativeMaxRecordsIsNamed(t *testing.T) {
	_, err := NewMemoryStore(MemoryOptions{MaxRecords: -1})
	if !errors.Is(err, floodgate.ErrInvalidPolicy) || !strings.Contains(err.Error(), "max records -1 is negative") {
		t.Fatalf("got %v, want ErrInvalidPolicy naming max records", err)
	}
}
