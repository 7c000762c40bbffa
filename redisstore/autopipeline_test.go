package redisstore

import (
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/vectors"
	"github.com/redis/go-redis/v9"
)

// TestAutoPipeliner runs the vectors and the concurrency proof through
// go-redis's automatic pipeliner (blocking and deferred faces), which the
// Store accepts as a Client.
func TestAutoPipeliner(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for name, get := range map[string]func() (*redis.AutoPipeliner, error){
		"blocking": c.AutoPipeline,
		"deferred": c.AsyncAutoPipeline,
	} {
		t.Run(name, func(t *testing.T) {
			ap, err := get()
			if err != nil {
				t.Fatal(err)
			}
			e := newEnvOn(t, ap, []*redis.Client{c}, Options{})
			vectors.Run(t, "ap-"+e.prefix, e.decider())
			testConcurrent(t, e, 2)
		})
	}
}
