package redisstore

import (
	_ "embed" // go:embed of the Lua sources
	"strconv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/luascript"
)

// The Lua sources, one file per algorithm (each defines local functions to
// read, step, write and release its state), plus the shared helpers, the
// per-layer checks, the release and the entry point. They are concatenated,
// in this order, into one script so that one EVALSHA decides every layer of
// a call, and one script (one SHA) serves every mode.
var (
	//go:embed lua/common.lua
	luaCommon string
	//go:embed lua/fixed_window.lua
	luaFixedWindow string
	//go:embed lua/sliding_window.lua
	luaSlidingWindow string
	//go:embed lua/token_bucket.lua
	luaTokenBucket string
	//go:embed lua/gcra.lua
	luaGCRA string
	//go:embed lua/sliding_log.lua
	luaSlidingLog string
	//go:embed lua/quota.lua
	luaQuota string
	//go:embed lua/layer.lua
	luaLayer string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/decide.lua
	luaDecide string
)

// source is the Lua source the Store runs: the concatenation of the files
// under lua/. It is immutable.
var source = luaCommon + luaFixedWindow + luaSlidingWindow + luaTokenBucket + luaGCRA + luaSlidingLog + luaQuota +
	luaLayer + luaRelease + luaDecide

// script runs source on Redis through luascript: EVALSHA, EVAL once on
// NOSCRIPT, never resent by go-redis, failures classified by
// luascript.Classify. It is immutable.
//
// Its Options are the zero value, so every error reply, the script's own
// "ERR floodgate: ..." ones included, wraps floodgate.ErrStoreUnavailable
// ("nothing was written"), as before the package used luascript. That
// holds for the decide and reserve modes: decide.lua reads and checks every
// layer, and raises every error it raises, before its first write. It does
// not hold for the release mode: release.lua checks its arguments first,
// then writes its marker and gives the layers back one by one, and a read
// of a key whose type changed since the reservation (WRONGTYPE) fails after
// those writes. So the class of a release's error is never used:
// Store.release keeps the error only as the reason the part's reservation
// may still be held, and splitError reports such a part as
// floodgate.ErrIndeterminate (see TestReleaseErrorAfterWrite).
var script = luascript.New(source, luascript.Options{})

// Pre-boxed command arguments, so building a call allocates nothing for them.
var (
	argReserve any = "reserve"
	argRelease any = "release"
	// argNumKeys[n] is the decimal string n, the numkeys argument (a string,
	// so go-redis's cluster routing reads it without formatting); a release
	// has one key more than its layers, its marker.
	argNumKeys = numKeyArgs()
)

func numKeyArgs() [floodgate.MaxLayers + 2]any {
	var a [floodgate.MaxLayers + 2]any
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}
