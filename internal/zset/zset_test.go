package zset

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// model is the reference: a map of id to (value, expiry), sorted on
// demand.
type model map[string][2]int64

func (m model) sorted() []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if x, y := m[a][1], m[b][1]; x != y {
			if x < y {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return ids
}

// check compares s with m: length, every id's value and expiry, the first
// id, the order Ascending yields (every 64th step), and the heap and index
// invariants.
func check(t *testing.T, step int, s *Set[int64], m model) {
	t.Helper()
	if s.Len() != len(m) {
		t.Fatalf("step %d: len %d, want %d", step, s.Len(), len(m))
	}
	for id, ve := range m {
		v, at, ok := s.Get(id)
		if !ok || v != ve[0] || at != ve[1] {
			t.Fatalf("step %d: Get(%q) = %d, %d, %v; want %d, %d", step, id, v, at, ok, ve[0], ve[1])
		}
	}
	if ids := m.sorted(); len(ids) > 0 {
		if id, at, ok := s.First(); !ok || id != ids[0] || at != m[ids[0]][1] {
			t.Fatalf("step %d: First = %q, %d, %v; want %q", step, id, at, ok, ids[0])
		}
	} else if _, _, ok := s.First(); ok {
		t.Fatalf("step %d: First of an empty set", step)
	}
	ids := m.sorted()
	for _, n := range []int{0, 1, len(ids) / 2, len(ids) - 1, len(ids), -1} {
		at, ok := s.NthExpiry(n)
		if want := n >= 0 && n < len(ids); ok != want || ok && at != m[ids[n]][1] {
			t.Fatalf("step %d: NthExpiry(%d) = %d, %v of %d ids", step, n, at, ok, len(ids))
		}
	}
	if step%64 == 0 { // Ascending sorts a copy: not at every step
		i := 0
		for v, at := range s.Ascending() {
			if i >= len(ids) || v != m[ids[i]][0] || at != m[ids[i]][1] {
				t.Fatalf("step %d: Ascending's %d-th = %d, %d; want %q's", step, i, v, at, ids[min(i, len(ids)-1)])
			}
			i++
		}
		if i != len(ids) {
			t.Fatalf("step %d: Ascending yielded %d of %d", step, i, len(ids))
		}
	}
	for i := 1; i < len(s.items); i++ {
		if s.items[i].before(&s.items[(i-1)/2]) {
			t.Fatalf("step %d: heap order broken at %d", step, i)
		}
	}
	switch {
	case len(s.items) > IndexFrom && s.index == nil:
		t.Fatalf("step %d: %d items and no index", step, len(s.items))
	case len(s.items) <= IndexFrom && s.index != nil:
		t.Fatalf("step %d: %d items and an index", step, len(s.items))
	}
	for id, i := range s.index {
		if s.items[i].id != id {
			t.Fatalf("step %d: index says %q at %d, item there is %q", step, id, i, s.items[i].id)
		}
	}
	if len(s.index) != 0 && len(s.index) != len(s.items) {
		t.Fatalf("step %d: %d indexed, %d items", step, len(s.index), len(s.items))
	}
}

// TestSetAgainstModel runs random operations, on sets that grow past the
// index threshold and shrink back, against a sorted map.
func TestSetAgainstModel(t *testing.T) {
	for _, size := range []int{4, IndexFrom + 1, 100, 2000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(size), 1))
			var s Set[int64]
			m := model{}
			now := int64(0)
			for step := range 20 * size {
				id := fmt.Sprintf("id%d", rng.IntN(2*size))
				switch op := rng.IntN(10); {
				case op < 4: // add, with ties in expiry
					if _, ok := m[id]; !ok {
						v, at := rng.Int64(), now+rng.Int64N(50)
						s.Add(id, v, at)
						m[id] = [2]int64{v, at}
					}
				case op < 5:
					if ve, ok := m[id]; ok {
						at := now + rng.Int64N(50)
						s.SetExpiry(id, at)
						m[id] = [2]int64{ve[0], at}
					}
				case op < 7:
					s.Remove(id)
					delete(m, id)
				case op < 8:
					now += rng.Int64N(5)
					for {
						gid, v, ok := s.PopExpired(now)
						ids := m.sorted()
						if !ok {
							if len(ids) > 0 && m[ids[0]][1] <= now {
								t.Fatalf("step %d: PopExpired(%d) found nothing, %q expired at %d", step, now, ids[0], m[ids[0]][1])
							}
							break
						}
						if gid != ids[0] || v != m[gid][0] || m[gid][1] > now {
							t.Fatalf("step %d: PopExpired(%d) = %q, want %q", step, now, gid, ids[0])
						}
						delete(m, gid)
					}
				case op < 9:
					if ids := m.sorted(); len(ids) > 0 {
						delete(m, ids[0])
					}
					s.PopFirst()
				default:
					if got, want := s.Has(id), m[id] != [2]int64{}; got != want {
						t.Fatalf("step %d: Has(%q) = %v, want %v", step, id, got, want)
					}
				}
				check(t, step, &s, m)
			}
		})
	}
}

// TestSetGivesMemoryBack: a set that grew to 10,000 ids and shrank to a
// few holds an array and index of their size, and an emptied set holds
// nothing.
func TestSetGivesMemoryBack(t *testing.T) {
	var s Set[int64]
	for i := range 10_000 {
		s.Add(fmt.Sprint("id", i), 0, int64(i))
	}
	for range 10_000 - 20 {
		s.PopFirst()
	}
	if c := cap(s.items); c > 4*20 {
		t.Errorf("20 items in an array of %d", c)
	}
	if s.indexed > 4*20 {
		t.Errorf("index built for %d items, holds %d", s.indexed, len(s.index))
	}
	for s.Len() > IndexFrom {
		s.PopFirst()
	}
	if s.index != nil {
		t.Errorf("index kept at %d items", s.Len())
	}
	for s.Len() > 0 {
		s.PopFirst()
	}
	if s.items != nil || s.index != nil {
		t.Errorf("empty set holds %d items' array, index %v", cap(s.items), s.index != nil)
	}
}

// TestSetAllocations: the zero Set allocates nothing until the first Add;
// a small set's lookups and an add and remove of one id within its
// array's capacity allocate nothing.
func TestSetAllocations(t *testing.T) {
	var s Set[int64]
	if n := testing.AllocsPerRun(100, func() {
		s.Has("x")
		s.PopExpired(1)
		s.First()
	}); n != 0 {
		t.Errorf("an empty set's reads: %v allocations", n)
	}
	for i := range 4 {
		s.Add(fmt.Sprint("id", i), 0, int64(i))
	}
	if n := testing.AllocsPerRun(100, func() {
		s.Add("x", 1, 2)
		s.Get("id3")
		s.Remove("x")
	}); n != 0 {
		t.Errorf("add, get and remove in a small set: %v allocations", n)
	}
}
