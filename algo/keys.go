package algo

import (
	"time"

	"github.com/floodgate-rl/floodgate"
)

// QuotaPeriod returns the calendar period of a Quota policy containing now
// (Unix µs): its start and end in Unix µs and its storage tag.
func QuotaPeriod(p floodgate.Policy, now int64) (start, end int64, tag string) {
	per := p.Calendar.PeriodAt(time.UnixMicro(now))
	return per.Start.UnixMicro(), per.End.UnixMicro(), p.Calendar.StorageTag(per)
}

// KeyAt is floodgate.Key for a decision at now (Unix µs): for a Quota
// policy it appends ":" and the period's tag, so each period has its own
// key, e.g. "fg:billing:qt:{ruser42}:m2026-12". It is the key a
// floodgate.Limiter gives its Store.
func KeyAt(prefix string, p floodgate.Policy, identity string, now int64) string {
	k := floodgate.Key(prefix, p, identity)
	if p.Algorithm == floodgate.Quota {
		_, _, tag := QuotaPeriod(p, now)
		return k + ":" + tag
	}
	return k
}

// HashTag returns the part of key between the first '{' and the next '}',
// the part Redis Cluster hashes, or key itself when there is none (Redis's
// rule).
func HashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j == i+1 {
						return key
					}
					return key[i+1 : j]
				}
			}
			return key
		}
	}
	return key
}

// KeyBorrower is implemented by a floodgate.Store that keeps no reference
// to a layer's Key once Decide has returned: it copies any key it stores,
// and does not hand the key to anything that outlives the call. A
// floodgate.Limiter gives such a store single-layer keys built in a reused
// buffer, so that a decision allocates nothing. memstore.Store is one; a
// Store that does not implement the interface, or whose BorrowsKeys
// returns false, gets a newly allocated key string on every call.
type KeyBorrower interface {
	BorrowsKeys() bool
}

// UsableChecker is implemented by a floodgate.Store whose zero value
// cannot decide, such as memstore.Store, redisstore.Store and
// fallback.Store, each of which must be made by its New: Usable returns
// nil for a Store so made, and otherwise an error saying how to make it.
// floodgate.New and fallback.New refuse a Store whose Usable fails, where
// its first decision would have panicked. A Store that does not implement
// the interface is taken as it is.
type UsableChecker interface {
	Usable() error
}
