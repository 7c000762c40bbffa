package redisstore

import (
	_ "embed" // go:embed of the Lua sources
	"strconv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/luascript"
)

// The Lua sources. Each algorithm's Lua is one file, cut into blocks that
// assemble.go puts into every script deciding it; the other files are the
// scripts' frames: the general script's helpers, per-layer checks, release
// and entry point, the sliding log's functions (its state is a sorted set,
// decided by the general script only), the single-layer scripts' head and
// tail, and the layered script's loop.
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
	//go:embed lua/fast_layers.lua
	luaFastLayers string
	//go:embed lua/fast_head.lua
	luaFastHead string
	//go:embed lua/fast_tail.lua
	luaFastTail string
	//go:embed lua/fast_end.lua
	luaFastEnd string
)

// scriptSet is the scripts of one StateFormat: all of them read states in
// both formats and write that one. It is immutable.
type scriptSet struct {
	// general is the general script: common.lua, the algorithms'
	// functions, sliding_log.lua, layer.lua, release.lua (with the
	// algorithms' releases) and decide.lua. It decides every algorithm,
	// one layer or many, in the decide and reserve modes, and releases
	// reservations.
	//
	// It runs through luascript: EVALSHA, EVAL once on NOSCRIPT, never
	// resent by go-redis, failures classified by luascript.Classify. Its
	// Options are the zero value, so every error reply, the script's own
	// "ERR floodgate: ..." ones included, wraps
	// floodgate.ErrStoreUnavailable ("nothing was written"), as before the
	// package used luascript. That holds for the decide and reserve modes:
	// decide.lua reads and checks every layer, and raises every error it
	// raises, before its first write. It does not hold for the release
	// mode: release.lua checks its arguments first, then writes its marker
	// and gives the layers back one by one, and a read of a key whose type
	// changed since the reservation (WRONGTYPE) fails after those writes.
	// So the class of a release's error is never used: Store.release keeps
	// the error only as the reason the part's reservation may still be
	// held, and splitError reports such a part as floodgate.ErrIndeterminate
	// (see TestReleaseErrorAfterWrite).
	general *luascript.Script
	// fast are the single-layer scripts, by algorithm: each decides one
	// layer exactly as a one-layer call of the general script would, on
	// the same state, but defines no function (Redis runs a script's whole
	// body on every call, so every function defined in it is created again
	// each time; see lua/fast_head.lua), with the same machinery and error
	// classes as general (a single-layer script makes every read and check
	// before its one write). The sliding log has none (nil): its cost is
	// in its sorted-set commands, so it stays on the general script.
	fast [floodgate.Quota + 1]*luascript.Script
	// layers decides layered decisions without a sliding log layer, one
	// or many per call, exactly as the general script's decide mode would,
	// but written out flat (lua/fast_layers.lua with the algorithms'
	// blocks): the general script's functions cost about 40,000 server
	// instructions per call to create. Its call is n, now and 6n layer
	// arguments per decision, or the packed layout (see
	// batchFrame.buildLayered); a lone decision's is its keys and one
	// packed argument (frame.buildLoneLayers).
	layers *luascript.Script
}

func newScriptSet(format StateFormat) *scriptSet {
	s := &scriptSet{
		general: luascript.New(luaCommon+generalFunctions(format)+luaSlidingLog+luaLayer+releaseSource(format)+luaDecide, luascript.Options{}),
		layers:  luascript.New(layersSource(format), luascript.Options{}),
	}
	for _, f := range fragments {
		s.fast[f.algo] = luascript.New(f.fastSource(format), luascript.Options{})
	}
	return s
}

// scriptSets are the scripts by the format they write. Both are built at
// init (their sources and digests); Redis loads each script on its first
// use (EVAL after NOSCRIPT), so a Store loads only its format's.
var scriptSets = [...]*scriptSet{BinaryState: newScriptSet(BinaryState), TextState: newScriptSet(TextState)}

// The scripts writing the default format, BinaryState, and their sources,
// by the names the tests use.
var (
	script       = scriptSets[BinaryState].general
	source       = script.Source()
	fastScripts  = scriptSets[BinaryState].fast
	layersScript = scriptSets[BinaryState].layers
	fastSources  = func() (s [len(fastScripts)]string) {
		for a, sc := range fastScripts {
			if sc != nil {
				s[a] = sc.Source()
			}
		}
		return s
	}()
)

// isLayers reports whether sc is a layered script (of either format).
func isLayers(sc *luascript.Script) bool {
	return sc == scriptSets[BinaryState].layers || sc == scriptSets[TextState].layers
}

// hasFastScript reports whether algorithm a has a single-layer script.
func hasFastScript(a floodgate.Algorithm) bool {
	return int(a) < len(fastScripts) && fastScripts[a] != nil
}

// scriptFor returns the script of ss that decides layers: the algorithm's
// single-layer script for one layer, when it has one; the layered script
// for several without a sliding log; else the general script.
func (ss *scriptSet) scriptFor(layers []floodgate.Layer) *luascript.Script {
	if len(layers) == 1 {
		if hasFastScript(layers[0].Policy.Algorithm) {
			return ss.fast[layers[0].Policy.Algorithm]
		}
		return ss.general
	}
	for i := range layers {
		if !hasFastScript(layers[i].Policy.Algorithm) { // the sliding log has none
			return ss.general
		}
	}
	return ss.layers
}

// Pre-boxed command arguments, so building a call allocates nothing for them.
var (
	argReserve any = "reserve"
	argRelease any = "release"
	argBare    any = "bare" // a release without a marker (Store.release)
	argProbe   any = "probe"
	argPacked  any = "p" // the layered script's packed layout
	argHot     any = "h" // a single-layer batch in which a key repeats
	// argNumKeys[n] is the decimal string n, the numkeys argument (a string,
	// so go-redis's cluster routing reads it without formatting); a release
	// has 2n+1 keys for n layers: theirs, its marker and their journals.
	argNumKeys = numKeyArgs()
)

func numKeyArgs() [2*floodgate.MaxLayers + 2]any {
	var a [2*floodgate.MaxLayers + 2]any
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}
