package membench

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

func BenchmarkTmpSubjects(b *testing.B) {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprint("user-", i)
	}
	for _, s := range []Subject{MemstoreDirect(floodgate.SlidingWindow), MemstoreDirect(floodgate.GCRA), Sethvargo()} {
		b.Run(s.Name, func(b *testing.B) {
			nd, c, err := s.Setup(keys)
			if err != nil {
				b.Fatal(err)
			}
			defer c()
			w := nd()
			for i := range keys {
				w(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				d := nd()
				r := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					d(r.IntN(len(keys)))
				}
			})
		})
	}
}
