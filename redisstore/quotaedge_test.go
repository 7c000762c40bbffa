package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Asia/Kathmandu, whatever the machine has installed

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/redis/go-redis/v9"
)

// quotaEdge is a Quota decision near the ends of the epoch..MaxTimeMicros.
type quotaEdge struct {
	name    string
	cal     floodgate.Calendar
	at      time.Time
	refused bool // the period does not lie within the range
}

func quotaEdges(t testing.TB) []quotaEdge {
	t.Helper()
	kat, err := time.LoadLocation("Asia/Kathmandu")
	if err != nil {
		t.Fatal(err)
	}
	day := floodgate.Calendar{Unit: floodgate.PeriodDay}
	return []quotaEdge{
		{"week of 1970-01-02 began in 1969", floodgate.Calendar{Unit: floodgate.PeriodWeek}, time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC), true},
		{"kathmandu day of 1970-01-01T01:00Z began in 1969", floodgate.Calendar{Unit: floodgate.PeriodDay, Location: kat}, time.Unix(3600, 0), true},
		{"anchored month of 1970-01-10 began in 1969", floodgate.Calendar{Unit: floodgate.PeriodAnchoredMonth, AnchorDay: 15}, time.Date(1970, 1, 10, 0, 0, 0, 0, time.UTC), true},
		{"month of 2112-09 ends after MaxTimeMicros", floodgate.Calendar{Unit: floodgate.PeriodMonth}, time.Date(2112, 9, 1, 0, 0, 0, 0, time.UTC), true},
		{"day at MaxTimeMicros", day, time.UnixMicro(floodgate.MaxTimeMicros), true},
		{"utc day starting at the epoch", day, time.UnixMicro(1), false},
		{"month of 1970-01", floodgate.Calendar{Unit: floodgate.PeriodMonth}, time.Date(1970, 1, 20, 0, 0, 0, 0, time.UTC), false},
		{"last whole day before MaxTimeMicros", day, time.UnixMicro(floodgate.MaxTimeMicros).Add(-48 * time.Hour), false},
	}
}

// decideFunc is a store's Decide returning its results.
type decideFunc func(ctx context.Context, now int64, layers []floodgate.Layer) ([]floodgate.Result, error)

// memDecide is s.Decide as a decideFunc.
func memDecide(s floodgate.Store) decideFunc {
	return func(ctx context.Context, now int64, layers []floodgate.Layer) ([]floodgate.Result, error) {
		out := make([]floodgate.Result, len(layers))
		err := s.Decide(ctx, now, layers, out)
		return out, err
	}
}

// edgeOutcome decides e twice (cost 3, then a peek) and describes it.
func edgeOutcome(ctx context.Context, decide decideFunc, e quotaEdge, layers func(floodgate.Policy) []floodgate.Layer) string {
	p, err := floodgate.NewQuota("edge", 10, e.cal)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, cost := range []int64{3, 0} {
		ls := layers(p)
		for i := range ls {
			ls[i].Cost = cost
		}
		out, err := decide(ctx, e.at.UnixMicro(), ls)
		switch {
		case errors.Is(err, floodgate.ErrInvalidTime) && !errors.Is(err, floodgate.ErrStoreUnavailable):
			b.WriteString("refused (invalid time);")
		case err != nil:
			fmt.Fprintf(&b, "error %v;", err)
		default:
			for _, r := range out {
				fmt.Fprintf(&b, "allowed=%v remaining=%d reset=%d;", r.Allowed, r.Remaining, r.ResetAt.UnixMicro())
			}
		}
	}
	return b.String()
}

// TestQuotaPeriodOutsideTimeRange decides Quota layers whose calendar
// period starts before the Unix epoch or ends after MaxTimeMicros on the
// memory store and on Redis (both state formats, one layer and two
// layers), and near those ends inside the range: both stores must
// agree, and refuse the former with ErrInvalidTime, naming the period,
// not with ErrStoreUnavailable (the script refused the period's bounds,
// which read as an outage).
func TestQuotaPeriodOutsideTimeRange(t *testing.T) {
	ctx := context.Background()
	edges := quotaEdges(t)
	forEachFormat(t, func(t *testing.T, e *env) {
		for _, n := range []int{1, 2} {
			mem, err := memstore.New(memstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i, edge := range edges {
				layers := func(p floodgate.Policy) []floodgate.Layer {
					var ls []floodgate.Layer
					for j := range n {
						ls = append(ls, floodgate.Layer{Policy: p, Key: fmt.Sprintf("%s:edge%d:%d:%d", e.prefix, n, i, j)})
					}
					return ls
				}
				got := edgeOutcome(ctx, e.decide, edge, layers)
				want := edgeOutcome(ctx, memDecide(mem), edge, layers)
				if got != want {
					t.Errorf("%d layers, %s: redis %s, memory %s", n, edge.name, got, want)
				}
				if refused := strings.HasPrefix(got, "refused"); refused != edge.refused {
					t.Errorf("%d layers, %s: %s, want refused=%v", n, edge.name, got, edge.refused)
				}
			}
		}
	})
	// The error names the period.
	p, err := floodgate.NewQuota("edge", 10, floodgate.Calendar{Unit: floodgate.PeriodWeek})
	if err != nil {
		t.Fatal(err)
	}
	err = floodgate.CheckLayers(time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC).UnixMicro(), []floodgate.Layer{{Policy: p, Key: "k", Cost: 1}}, make([]floodgate.Result, 1))
	if !errors.Is(err, floodgate.ErrInvalidTime) || !strings.Contains(err.Error(), "1970-W01") || !strings.Contains(err.Error(), "1969-12-29T00:00:00Z") {
		t.Errorf("got %v, want ErrInvalidTime naming week 1970-W01 from 1969-12-29", err)
	}
}

// TestQuotaPeriodOutsideTimeRangeCluster is TestQuotaPeriodOutsideTimeRange
// on a Redis Cluster, with the layers in one slot and split over slots.
func TestQuotaPeriodOutsideTimeRangeCluster(t *testing.T) {
	t.Parallel() // mostly waits for servers to form
	cl := redistest.StartCluster(t)
	var nodes []*redis.Client
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Client(t))
	}
	e := newEnvOn(t, cl.Client(t), nodes, Options{})
	ctx := context.Background()
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, split := range []bool{false, true} {
		for i, edge := range quotaEdges(t) {
			layers := func(p floodgate.Policy) []floodgate.Layer {
				tag := "{one}"
				var ls []floodgate.Layer
				for j := range 3 {
					if split {
						tag = fmt.Sprintf("{s%d}", j)
					}
					ls = append(ls, floodgate.Layer{Policy: p, Key: fmt.Sprintf("%s:%s:edge%v:%d:%d", e.prefix, tag, split, i, j)})
				}
				return ls
			}
			got := edgeOutcome(ctx, e.decide, edge, layers)
			want := edgeOutcome(ctx, memDecide(mem), edge, layers)
			if got != want {
				t.Errorf("split %v, %s: cluster %s, memory %s", split, edge.name, got, want)
			}
			if refused := strings.HasPrefix(got, "refused"); refused != edge.refused {
				t.Errorf("split %v, %s: %s, want refused=%v", split, edge.name, got, edge.refused)
			}
		}
	}
}
