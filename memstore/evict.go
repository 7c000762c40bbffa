package memstore

// Eviction. Each shard keeps its entries on two recency lists, a
// segmented LRU:
//
//   - probation holds identities decided once since they were stored
//     (what a flood of junk identities creates);
//   - protected holds identities decided again after being stored (the
//     store's known users), at most protectedShare of the shard's cap; an
//     identity promoted into a full protected list pushes that list's
//     least recently used entry back to the front of probation.
//
// When a new identity finds its shard at its cap, the shard first drops
// an expired entry among the tailChecks least recently used of each list,
// else up to sampleFree expired entries among 32 visited from a random
// place in the shard, and only if it found none evicts the least recently
// used entry of probation, or of protected when probation is empty. (An
// expired entry that neither look finds may so outlive a live one-off
// identity; the sweeps reclaim it later: see sweep.go.) A flood of
// identities seen once so only ever evicts other identities seen once:
// an identity decided twice stays tracked exactly, whatever the flood's
// size, until identities decided more recently and more than once fill
// the protected list. Every step is O(1) (bounded sampling), so a full
// shard costs a new identity a few hundred nanoseconds, never a scan.

const (
	segProbation uint8 = iota
	segProtected
)

// protectedShare is the part of a shard's cap (in fifths) that identities
// decided more than once may hold.
const protectedShare = 4

// tailChecks is how many entries from each list's tail a full shard looks
// at for expired state before it samples the shard or evicts.
const tailChecks = 4

// sampleFree is how many expired entries a full shard's sample frees at
// most; it visits four times as many entries (32), from a random place.
const sampleFree = 8

// list is an intrusive doubly linked recency list: root.next is the most
// recently used entry, root.prev the least.
type list struct {
	root entry
	n    int
	// pushes counts the entries put at the front; an entry's at is the
	// count when it was put there, so pushes-at bounds how far from the
	// front it has drifted.
	pushes uint32
}

func (l *list) init() { l.root.next, l.root.prev = &l.root, &l.root }

func (l *list) pushFront(e *entry) {
	e.prev, e.next = &l.root, l.root.next
	l.root.next.prev = e
	l.root.next = e
	l.n++
	l.pushes++
	e.at = l.pushes
}

func (l *list) remove(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	l.n--
}

// back returns the least recently used entry, or nil.
func (l *list) back() *entry {
	if l.n == 0 {
		return nil
	}
	return l.root.prev
}

func (sh *shard) listOf(e *entry) *list {
	if e.seg == segProtected {
		return &sh.protected
	}
	return &sh.probation
}

// touch records a decision on an existing entry: a protected entry moves
// to the front of its list; a probation entry is promoted to protected,
// demoting protected's least recently used entry when it is full.
//
// A protected entry moves only once it may have drifted into the back
// half of the list (half of protCap pushes since it was put at the
// front): relinking costs pointer writes, and each of those a garbage
// collector write barrier while a collection runs, which is where a busy
// service spends much of its time. So an identity decided at least once
// every protCap/2 promotions into its shard's protected list is never
// demoted, let alone evicted, and a frequently decided one is relinked
// only every protCap/2 promotions, not on every decision.
func (sh *shard) touch(e *entry) {
	if e.seg == segProtected {
		if sh.protected.pushes-e.at >= sh.lazy {
			sh.protected.remove(e)
			sh.protected.pushFront(e)
		}
		return
	}
	if sh.protCap == 0 {
		if sh.probation.root.next != e {
			sh.probation.remove(e)
			sh.probation.pushFront(e)
		}
		return
	}
	sh.probation.remove(e)
	if sh.protected.n >= sh.protCap {
		d := sh.protected.back()
		sh.protected.remove(d)
		d.seg = segProbation
		sh.probation.pushFront(d)
	}
	e.seg = segProtected
	sh.protected.pushFront(e)
}

// insert stores a new entry for key at the front of probation.
func (sh *shard) insert(key string, e *entry) {
	e.key = key
	e.seg = segProbation
	sh.entries[key] = e
	sh.peak = max(sh.peak, len(sh.entries))
	sh.probation.pushFront(e)
}

// drop deletes e from the shard.
func (sh *shard) drop(e *entry) {
	sh.listOf(e).remove(e)
	delete(sh.entries, e.key)
}

// makeRoom frees one place in a full shard for a new identity: an expired
// entry if it finds one, else the least recently used live entry, which
// it counts as an eviction. Entries in pinned (the other layers of the
// decision being committed) are never dropped; if only they could go, the
// shard goes over its cap by at most floodgate.MaxLayers-1 entries until
// the next eviction.
func (sh *shard) makeRoom(mono int64, pinned []*entry) {
	if len(sh.entries) < sh.perCap {
		return
	}
	for _, l := range [2]*list{&sh.probation, &sh.protected} {
		e := l.back()
		for i := 0; i < tailChecks && e != nil && e != &l.root; i++ {
			prev := e.prev
			if e.expires <= mono && !isPinned(e, pinned) {
				sh.drop(e)
				return
			}
			e = prev
		}
	}
	if sh.sweep(mono, sampleFree, pinned) > 0 {
		return
	}
	for _, l := range [2]*list{&sh.probation, &sh.protected} {
		e := l.back()
		for e != nil && e != &l.root && isPinned(e, pinned) {
			e = e.prev
		}
		if e != nil && e != &l.root {
			sh.drop(e)
			sh.evictions++
			return
		}
	}
}

func isPinned(e *entry, pinned []*entry) bool {
	for _, p := range pinned {
		if p == e {
			return true
		}
	}
	return false
}
