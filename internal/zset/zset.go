// Package zset holds the in-process form of a Redis sorted set whose
// scores are expiry times: ids with a value each, ordered by expiry, then
// by id bytes, as ZRANGEBYSCORE returns them. The quota ledger keeps its
// reservations and settlement outcomes in it, the concurrency store its
// leases.
//
// A Set is sized for memory first, since an in-memory store holds
// millions of them: its zero value is empty and allocates nothing, a set
// of up to IndexFrom ids is one slice searched by scanning, and only a
// larger one gets a map from id to position. Removals leave nothing
// behind (no stale heap items), and a set that shrank to a quarter of its
// size gives the memory back.
package zset

import (
	"iter"
	"math"
	"slices"
)

// IndexFrom is the size above which a Set indexes its ids with a map;
// up to it, finding an id scans at most this many entries.
const IndexFrom = 16

// MaxLen is the most ids a Set holds (positions are int32).
const MaxLen = math.MaxInt32

// Set is a set of ids, each with a value and an expiry, ordered like a
// Redis sorted set scored by expiry. The zero value is an empty set. A Set
// is not safe for concurrent use; it must not be copied after first use.
type Set[V any] struct {
	// items is a binary min-heap in sorted-set order.
	items []entry[V]
	// index maps an id to its position in items; nil while there are at
	// most IndexFrom items.
	index map[string]int32
	// indexed is how many items index was built for or has held since:
	// when they fall below a quarter of it the map, which never shrinks,
	// is rebuilt at the new size.
	indexed int
}

type entry[V any] struct {
	id string
	at int64
	v  V
}

func (e *entry[V]) before(o *entry[V]) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.id < o.id
}

// Len returns the number of ids in the set.
func (s *Set[V]) Len() int { return len(s.items) }

// find returns the position of id, or -1.
func (s *Set[V]) find(id string) int {
	if s.index != nil {
		if i, ok := s.index[id]; ok {
			return int(i)
		}
		return -1
	}
	for i := range s.items {
		if s.items[i].id == id {
			return i
		}
	}
	return -1
}

// Has reports whether id is in the set, expired or not.
func (s *Set[V]) Has(id string) bool { return s.find(id) >= 0 }

// Get returns the value and expiry of id, and whether it is in the set.
func (s *Set[V]) Get(id string) (v V, at int64, ok bool) {
	i := s.find(id)
	if i < 0 {
		return v, 0, false
	}
	return s.items[i].v, s.items[i].at, true
}

// Add inserts id with value v and expiry at. id must not be in the set,
// and the set must hold fewer than MaxLen ids.
func (s *Set[V]) Add(id string, v V, at int64) {
	if n := len(s.items); n == cap(s.items) {
		// Grow by half, not double as append would: a set's spare room
		// is memory held for nothing, in millions of sets.
		s.items = append(make([]entry[V], 0, n+max(n/2, 1)), s.items...)
	}
	s.items = append(s.items, entry[V]{id: id, at: at, v: v})
	n := len(s.items)
	if s.index == nil && n > IndexFrom {
		s.reindex()
	} else if s.index != nil {
		s.index[id] = int32(n - 1)
		s.indexed = max(s.indexed, n)
	}
	s.up(n - 1)
}

// SetExpiry changes the expiry of id, which must be in the set.
func (s *Set[V]) SetExpiry(id string, at int64) {
	i := s.find(id)
	s.items[i].at = at
	if !s.down(i) {
		s.up(i)
	}
}

// Remove removes id, if it is in the set.
func (s *Set[V]) Remove(id string) {
	if i := s.find(id); i >= 0 {
		s.removeAt(i)
	}
}

// First returns the id and expiry that sort first, and false when the set
// is empty.
func (s *Set[V]) First() (id string, at int64, ok bool) {
	if len(s.items) == 0 {
		return "", 0, false
	}
	return s.items[0].id, s.items[0].at, true
}

// NthExpiry returns the expiry of the id that sorts n-th (from 0), and
// false when the set holds n ids or fewer. It copies the expiries and
// selects in them: linear in the set's size, for a rare question (n 0 is
// First's, in constant time).
func (s *Set[V]) NthExpiry(n int) (at int64, ok bool) {
	if n < 0 || n >= len(s.items) {
		return 0, false
	}
	if n == 0 {
		return s.items[0].at, true
	}
	ats := make([]int64, len(s.items))
	for i := range s.items {
		ats[i] = s.items[i].at
	}
	slices.Sort(ats)
	return ats[n], true
}

// Ascending returns an iterator over the values and expiries in the set's
// order (by expiry, then id), as ZRANGE returns them. It reads the heap
// without changing it, keeping the positions that may come next in a
// small heap of its own: the first k cost O(k log k), whatever the set's
// size. The set must not change during the iteration.
func (s *Set[V]) Ascending() iter.Seq2[V, int64] {
	return func(yield func(V, int64) bool) {
		if len(s.items) == 0 {
			return
		}
		next := frontier[V]{items: s.items, at: []int32{0}}
		for len(next.at) > 0 {
			i := next.pop()
			if !yield(s.items[i].v, s.items[i].at) {
				return
			}
			for c := 2*i + 1; c <= 2*i+2 && int(c) < len(s.items); c++ {
				next.push(c)
			}
		}
	}
}

// frontier is a binary min-heap of positions in items, in items' order:
// the positions Ascending may yield next.
type frontier[V any] struct {
	items []entry[V]
	at    []int32
}

func (f *frontier[V]) less(a, b int) bool {
	return f.items[f.at[a]].before(&f.items[f.at[b]])
}

func (f *frontier[V]) push(i int32) {
	f.at = append(f.at, i)
	for c := len(f.at) - 1; c > 0; {
		p := (c - 1) / 2
		if !f.less(c, p) {
			break
		}
		f.at[c], f.at[p] = f.at[p], f.at[c]
		c = p
	}
}

func (f *frontier[V]) pop() int32 {
	top, last := f.at[0], len(f.at)-1
	f.at[0] = f.at[last]
	f.at = f.at[:last]
	for p := 0; ; {
		c := 2*p + 1
		if c >= last {
			break
		}
		if c+1 < last && f.less(c+1, c) {
			c++
		}
		if !f.less(c, p) {
			break
		}
		f.at[c], f.at[p] = f.at[p], f.at[c]
		p = c
	}
	return top
}

// PopFirst removes the id that sorts first, if any.
func (s *Set[V]) PopFirst() {
	if len(s.items) > 0 {
		s.removeAt(0)
	}
}

// PopExpired removes and returns the id that sorts first, with its value,
// if its expiry is at or before now.
func (s *Set[V]) PopExpired(now int64) (id string, v V, ok bool) {
	if len(s.items) == 0 || s.items[0].at > now {
		return "", v, false
	}
	id, v = s.items[0].id, s.items[0].v
	s.removeAt(0)
	return id, v, true
}

func (s *Set[V]) removeAt(i int) {
	last := len(s.items) - 1
	if s.index != nil {
		delete(s.index, s.items[i].id)
	}
	if i != last {
		s.items[i] = s.items[last]
		s.place(i)
	}
	s.items[last] = entry[V]{} // let the id go
	s.items = s.items[:last]
	if i != last && !s.down(i) {
		s.up(i)
	}
	s.shrink()
}

// shrink gives memory back once the set holds a quarter of what it was
// sized for: the items' array, and the index (dropped at IndexFrom or
// below).
func (s *Set[V]) shrink() {
	n := len(s.items)
	if n == 0 {
		*s = Set[V]{}
		return
	}
	if c := cap(s.items); c > 2*IndexFrom && n < c/4 {
		s.items = append(make([]entry[V], 0, 2*n), s.items...)
	}
	switch {
	case s.index != nil && n <= IndexFrom:
		s.index, s.indexed = nil, 0
	case s.index != nil && n < s.indexed/4:
		s.reindex()
	}
}

// reindex builds the index afresh, sized for the items there are.
func (s *Set[V]) reindex() {
	s.index = make(map[string]int32, len(s.items))
	for i := range s.items {
		s.index[s.items[i].id] = int32(i)
	}
	s.indexed = len(s.items)
}

// place records the position of the item at i in the index.
func (s *Set[V]) place(i int) {
	if s.index != nil {
		s.index[s.items[i].id] = int32(i)
	}
}

// up moves the item at i towards the root while it sorts before its
// parent.
func (s *Set[V]) up(i int) {
	x := s.items[i]
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if !x.before(&s.items[p]) {
			break
		}
		s.items[i] = s.items[p]
		s.place(i)
		i, moved = p, true
	}
	if moved {
		s.items[i] = x
		s.place(i)
	}
}

// down moves the item at i towards the leaves while a child sorts before
// it, and reports whether it moved.
func (s *Set[V]) down(i int) bool {
	n := len(s.items)
	x := s.items[i]
	start := i
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && s.items[r].before(&s.items[c]) {
			c = r
		}
		if !s.items[c].before(&x) {
			break
		}
		s.items[i] = s.items[c]
		s.place(i)
		i = c
	}
	if i == start {
		return false
	}
	s.items[i] = x
	s.place(i)
	return true
}
