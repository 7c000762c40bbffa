package topk

import "sort"

// counter is one monitored key of a Space-Saving summary.
type counter struct {
	key   string
	count uint64 // upper bound of the key's true count
	err   uint64 // how much of count may belong to evicted keys
	idx   int    // position in the heap
}

// summary is the Space-Saving algorithm (Metwally, Agrawal, El Abbadi,
// 2005) over at most size counters, kept in a min-heap on count so that the
// smallest counter is found and replaced in O(log size). Not safe for
// concurrent use; Tracker locks around it.
type summary struct {
	size  int
	index map[string]*counter
	heap  []*counter
	total uint64 // sum of all counts added
}

func newSummary(size int) *summary {
	return &summary{size: size, index: make(map[string]*counter, size)}
}

// add counts n more occurrences of key.
func (s *summary) add(key string, n uint64) {
	s.total = satAdd(s.total, n)
	if c, ok := s.index[key]; ok {
		c.count = satAdd(c.count, n)
		s.down(c.idx)
		return
	}
	if len(s.heap) < s.size {
		c := &counter{key: key, count: n, idx: len(s.heap)}
		s.heap = append(s.heap, c)
		s.index[key] = c
		s.up(c.idx)
		return
	}
	// Replace the smallest counter: the new key inherits its count as
	// possible error, which is what keeps every count an upper bound.
	c := s.heap[0]
	delete(s.index, c.key)
	c.key, c.err, c.count = key, c.count, satAdd(c.count, n)
	s.index[key] = c
	s.down(0)
}

// floor is the largest count a key absent from the summary can have: the
// smallest counter once the summary is full, zero before.
func (s *summary) floor() uint64 {
	if len(s.heap) < s.size || len(s.heap) == 0 {
		return 0
	}
	return s.heap[0].count
}

// lookup returns key's count and error, or, for an absent key, floor as
// both (its true count is somewhere in 0..floor).
func (s *summary) lookup(key string) (count, err uint64) {
	if c, ok := s.index[key]; ok {
		return c.count, c.err
	}
	f := s.floor()
	return f, f
}

func (s *summary) less(i, j int) bool { return s.heap[i].count < s.heap[j].count }

func (s *summary) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].idx, s.heap[j].idx = i, j
}

func (s *summary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *summary) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(s.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(s.heap) && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}

// satAdd adds without wrapping around.
func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// sortItems orders items by count, largest first, then by key.
func sortItems(items []Item) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Count != items[j].Count {
			return items[i].Count > items[j].Count
		}
		return items[i].Key < items[j].Key
	})
}
