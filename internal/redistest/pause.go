package redistest

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// PauseWrites pauses the write commands of c's server (CLIENT PAUSE
// WRITE, for up to a minute), so that calls sent to it wait, and returns
// the function that lifts the pause. Calling it again does nothing; the
// pause is lifted at the latest when t ends.
func PauseWrites(t testing.TB, c interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}) (unpause func()) {
	t.Helper()
	ctx := context.Background()
	if err := c.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unpause = func() {
		once.Do(func() {
			if err := c.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(unpause)
	return unpause
}
