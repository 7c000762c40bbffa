package oneline

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestError(t *testing.T) {
	joined := fmt.Errorf("all unreachable: %w", errors.Join(io.EOF, errors.New("b")))
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"one line", io.EOF, "EOF"},
		{"joined", joined, "all unreachable: EOF; b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Error(tc.err)
			if tc.err == nil {
				if got != nil {
					t.Fatalf("Error(nil) = %v; want nil", got)
				}
				return
			}
			if got.Error() != tc.want {
				t.Errorf("Error(%q) = %q; want %q", tc.err, got, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("Error(%q) does not wrap it", tc.err)
			}
		})
	}
	if !errors.Is(Error(joined), io.EOF) {
		t.Errorf("Error(joined) hides io.EOF")
	}
}
