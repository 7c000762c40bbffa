package floodgate

import "errors"

// Sentinel errors. Errors returned by this package, by the stores
// (memstore, redisstore, denycache, fallback's Decide, Call and CallWrite
// for their own refusals) and by the constructors of memstore,
// redisstore, denycache, quota and concurrency wrap one of these with %w,
// so callers test them with errors.Is. Other packages add sentinels of
// their own, documented with them (fallback.ErrInvalidOptions and
// ErrBreakerOpen, httplimit.ErrNoKey, quota.ErrQuotaStateLost...).
var (
	// ErrInvalidPolicy reports a policy whose parameters are out of range,
	// or options or arguments a constructor or method cannot use (a
	// negative cap, a nil client or function).
	ErrInvalidPolicy = errors.New("floodgate: invalid policy")
	// ErrInvalidCost reports a negative or too large cost.
	ErrInvalidCost = errors.New("floodgate: invalid cost")
	// ErrInvalidKey reports an identity, prefix or key that cannot be used.
	ErrInvalidKey = errors.New("floodgate: invalid key")
	// ErrNilStore reports a nil Store given to New: pass memstore.New's or
	// redisstore.New's store.
	ErrNilStore = errors.New("floodgate: New needs a store, got nil (use memstore.New or redisstore.New)")
	// ErrInvalidTime reports a decision time outside the range the stores
	// decide at (see ValidateTime).
	ErrInvalidTime = errors.New("floodgate: invalid time")
	// ErrInvalidLayers reports an empty or too long list of layers.
	ErrInvalidLayers = errors.New("floodgate: invalid layers")
	// ErrStoreUnavailable reports that the store could not decide and the
	// decision was certainly not applied (nothing was written): it could
	// not be reached, or it refused the call (on Redis, any error reply:
	// OOM, READONLY, a key of the wrong type or holding a value floodgate
	// did not write, which the error's text names).
	ErrStoreUnavailable = errors.New("floodgate: store unavailable")
	// ErrIndeterminate reports that the store failed after the request may
	// have been applied (for example a connection reset after the script was
	// sent). Retrying blindly could count the request twice.
	ErrIndeterminate = errors.New("floodgate: outcome indeterminate")
	// ErrStoreFull reports that a store reached its key cap and could not
	// track a new identity. memstore never returns it (it evicts); the
	// in-memory quota and concurrency stores do. httplimit never fails open
	// on it, since a client choosing its keys can cause it.
	ErrStoreFull = errors.New("floodgate: store full")
	// ErrBadReply reports a store reply of an unexpected type or shape.
	ErrBadReply = errors.New("floodgate: bad store reply")
	// ErrForeignValue reports that a key the decision needs holds a value
	// floodgate did not write (on Redis, a foreign value or a key of the
	// wrong type), always together with ErrStoreUnavailable: nothing was
	// written. It is one identity's key that is unusable, not the store:
	// the fallback store decides such a decision locally without counting
	// it toward opening its circuit breaker, so that one bad key cannot
	// send every identity's decisions to the fallback.
	ErrForeignValue = errors.New("floodgate: foreign value")
	// ErrClusterRedirect reports a Redis Cluster redirection (a MOVED or
	// ASK reply) given as the answer to a call, always together with
	// ErrStoreUnavailable: the node ran nothing. A client for a single
	// Redis gets one from a node of a Cluster for nearly every key (those
	// of the slots the node does not serve): the address is a Redis
	// Cluster node, and it needs a cluster client (*redis.ClusterClient;
	// floodgate serve --redis-cluster). A cluster client follows
	// redirections itself, and returns one only when a resharding outran
	// its MaxRedirects.
	ErrClusterRedirect = errors.New("floodgate: a Redis Cluster node redirected the call (MOVED or ASK): a client for a single Redis was given the address of a Redis Cluster node; use a cluster client (redis.NewClusterClient, floodgate serve --redis-cluster)")
	// ErrNilContext reports a nil context.Context given to a decision or
	// a store's call (which would otherwise panic deep in a store): pass
	// context.Background() or the request's context. Nothing was counted.
	ErrNilContext = errors.New("floodgate: nil context (use context.Background())")
)

// FailedKeyError is wrapped by a store's error when a decision whose
// layers it decided in several calls (a Redis Cluster decision whose keys
// span primaries) failed in the call for Key. A store that keeps a
// circuit breaker per partition (fallback.Store) blames that failure on
// Key's partition, not on the first layer's, which may be healthy.
type FailedKeyError struct {
	// Key is a key of the call that failed.
	Key string
	// Err is the failure.
	Err error
}

func (e *FailedKeyError) Error() string { return e.Err.Error() }

// Unwrap returns e.Err.
func (e *FailedKeyError) Unwrap() error { return e.Err }
