package redisstore

import (
	"crypto/sha1"
	_ "embed" // go:embed of the Lua sources
	"encoding/hex"
	"strconv"

	"github.com/floodgate-rl/floodgate"
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

// script is the Lua source the Store runs: the concatenation of the files
// under lua/. It is immutable.
var script = luaCommon + luaFixedWindow + luaSlidingWindow + luaTokenBucket + luaGCRA + luaSlidingLog + luaQuota +
	luaLayer + luaRelease + luaDecide

// scriptSHA is the SHA-1 of script in hex, the name EVALSHA knows it by.
var scriptSHA = sha1Hex(script)

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Pre-boxed command arguments, so building a call allocates nothing for them.
var (
	argEvalSha any = "evalsha"
	argEval    any = "eval"
	argSHA     any = scriptSHA
	argScript  any = script
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
