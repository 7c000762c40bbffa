package server

import "errors"

// operation is what a request asked of the store. A store failure's
// problem names it and says what a call that failed after it was sent
// may have done (which depends on the operation: a status changes
// nothing, a release may have freed its slot), and its log line names
// it.
type operation struct {
	// name is the operation as the problem and the log name it, e.g.
	// "quota status".
	name string
	// mayHave says what the operation may have done when the store
	// failed after it was sent, and what to do about it; empty for an
	// operation that only reads, which consumed nothing whether or not
	// it ran.
	mayHave string
	// unchanged, when set, says what an operation that was not applied
	// left as it was, for one that counts nothing: "nothing was changed"
	// for a quota restore, that the lease is still held for a release.
	// Empty means "nothing was counted".
	unchanged string
	// notReplicated, when set, is the whole detail of the 503
	// store-not-replicated answering the operation applied on the Redis
	// primary but not confirmed by its replicas.
	notReplicated string
}

// The operations the API sends to the store.
var (
	opRequest = operation{name: "request", mayHave: "it may have been counted"}
	opCheck   = operation{name: "check", mayHave: "it may have been counted (a check has no id: sent again, it may count twice)"}
	opPeek    = operation{name: "peek"}

	opQuotaCheck   = operation{name: "quota check", mayHave: "it may have been counted (a check has no id: sent again, it may count twice)"}
	opQuotaStatus  = operation{name: "quota status"}
	opQuotaReserve = operation{name: "quota reserve", mayHave: "the estimate may be held: send the reserve again with the same request_id (a hold already made is replayed, not made twice)"}
	opQuotaSettle  = operation{name: "quota settle", mayHave: "it may have been settled: send the settle again with the same request_id (a settlement already made is replayed, not charged twice)"}
	opQuotaRestore = operation{name: "quota restore", mayHave: "the usage may have been set: restoring it again is harmless", unchanged: "nothing was changed",
		notReplicated: "the restore was applied: the Redis primary holds the new usage, but fewer of its replicas than --redis-wait-replicas confirmed it in time, so a failover could still lose it; sending the restore again sets the same usage"}

	opAcquire = operation{name: "lease acquire", mayHave: "a slot may have been taken under a lease_id this answer cannot give; it frees itself when its lease_ttl ends"}
	opRelease = operation{name: "lease release", mayHave: "the lease may have been released: release it again (releasing is idempotent: \"released\": false then means it already was)",
		unchanged:     "the lease is still held (its slot stays taken until it is released or its lease_ttl ends): release it again later",
		notReplicated: "the lease was released on the Redis primary, but fewer of its replicas than --redis-wait-replicas confirmed it in time, so a failover could bring the lease back until its lease_ttl ends; releasing it again is harmless, but \"released\": false then says only that the primary answering no longer holds it (a release that changes nothing confirms nothing): across a failover, the lease may still be held on the new primary until its lease_ttl ends"}
	opRenew = operation{name: "lease renew", mayHave: "the lease may have been renewed: renew it again (a live lease is extended from now; 409 lease-lost means it is no longer held)",
		unchanged:     "the lease keeps its expiry: renew it again before it ends",
		notReplicated: "the lease was renewed on the Redis primary, but fewer of its replicas than --redis-wait-replicas confirmed it in time, so a failover could lose the renewal (the lease then ends at its previous expiry); renewing it again is harmless (409 lease-lost means it is no longer held)"}
)

// nothingDone says what an operation that was not applied did not do:
// for most, "nothing was counted".
func (op operation) nothingDone() string {
	if op.unchanged != "" {
		return op.unchanged
	}
	return "nothing was counted"
}

// readOnly reports an operation that consumes nothing.
func (op operation) readOnly() bool { return op.mayHave == "" }

// failed returns err, the failure of op, for fail to answer: a problem
// as it is, a store failure marked with op.
func (op operation) failed(err error) error {
	var p *problemError
	if errors.As(err, &p) {
		return err
	}
	return &storeFailure{op: op, err: err}
}

// storeFailure is a store failure of an operation.
type storeFailure struct {
	op  operation
	err error
}

func (f *storeFailure) Error() string { return f.op.name + ": " + f.err.Error() }
func (f *storeFailure) Unwrap() error { return f.err }
