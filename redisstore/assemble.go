package redisstore

import (
	"fmt"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// Each algorithm's Lua exists once, in lua/<algorithm>.lua, cut into
// blocks by lines "--@ name". The blocks are text with named slots, and
// assemble puts them, inlined, into every script that decides the
// algorithm: its single-layer script (fast_head.lua, the blocks,
// fast_tail.lua, fast_end.lua, and the blocks again in the head's section for a lone
// request; a lone request and each request of a packed call read their
// numbers from a packed record), the layered script (fast_layers.lua, one branch per
// algorithm, then fast_end.lua) and the general script (one function per algorithm). Redis
// runs a script's whole body on every call and creates every function it
// defines each time, so the fast scripts get the blocks as flat code and
// define no function.
//
// The blocks, and what they read and set:
//
//	args N    single-layer scripts only: checks the request's numbers
//	          N (a list of now, limit, w, b, md, cost: what the algorithm
//	          reads), which the assembler reads into locals of those names
//	          before the block, from the call's layout (see argReaders);
//	          sets, as the algorithm needs, b (the effective burst; a
//	          quota's period end) and iv; sets code and msg and breaks on
//	          bad ones. @OTHER ALGORITHM@ is true when the request's
//	          algorithm is not the block's.
//	read S    declares the state locals S and parses them from v (the
//	          key's value, a string, or false when there is no key); @BAD@
//	          is what to do when v is not the algorithm's state.
//	step      decides at now (which it may move forward) from the state
//	          locals, limit, w, b, md, iv and cost. It sets ok, reason
//	          (0 admitted, 1 limited, 2 the cost exceeds the capacity),
//	          rem, reset, retry and delay and, when the request consumed
//	          something, ttl (µs, before MIN_TTL and TTL_SLACK), val (the
//	          new state) and keep (the key's TTL already ends where ttl
//	          would, or later: see ttlEnd). @RESERVING@ is true when the
//	          call is a reservation, which starts the buckets'
//	          bookkeeping; the buckets' @TTL END@ is ttlEnd.
//	reserved  general script only: sets u1, u2, u3, what a release needs
//	          to give the request back.
//	release   general script only: the body of a function (key, cost, w,
//	          iv, b, u1, u2, u3) that gives a reservation back and returns
//	          what it gave.
//
// The blocks read and write their states through three slots per layout
// (see stateLayouts): "@IS x@" is a Lua expression, true when v (the key's
// value, a string) holds layout x in binary; "@UNPACK x@" its numbers, in
// order; "@PACK x@(a, b, ...)" the state of those numbers in the format
// the script writes (StateFormat): every script reads both formats, and
// is assembled twice, once per format it writes.
type fragment struct {
	name   string // the short name: fw, sw, tb, gc, qt
	algo   floodgate.Algorithm
	blocks map[string]string
	state  string   // the state locals the read block declares, e.g. "t, n"
	args   []string // the numbers the args block checks, in order, e.g. now, limit, w, cost
}

// fragments are the algorithms written as blocks, in the order of their
// Algorithm values (the sliding log, whose state is a sorted set read
// with several commands, exists as functions only, in sliding_log.lua).
var fragments = []*fragment{
	parseFragment("fw", floodgate.FixedWindow, luaFixedWindow),
	parseFragment("sw", floodgate.SlidingWindow, luaSlidingWindow),
	parseFragment("tb", floodgate.TokenBucket, luaTokenBucket),
	parseFragment("gc", floodgate.GCRA, luaGCRA),
	parseFragment("qt", floodgate.Quota, luaQuota),
}

var blockNames = []string{"args", "read", "step", "reserved", "release"}

// parseFragment cuts src into its blocks. A malformed file is a
// programming error caught by every test of the package: it panics at
// init.
func parseFragment(name string, a floodgate.Algorithm, src string) *fragment {
	f := &fragment{name: name, algo: a, blocks: map[string]string{}}
	cur := ""
	for line := range strings.Lines(src) {
		if rest, ok := strings.CutPrefix(line, "--@ "); ok {
			fields := strings.SplitN(strings.TrimSpace(rest), " ", 2)
			cur = fields[0]
			if _, dup := f.blocks[cur]; dup {
				panic(fmt.Sprintf("redisstore: lua for %s: block %q twice", name, cur))
			}
			switch cur {
			case "read":
				f.state = fields[1]
			case "args":
				if len(fields) < 2 {
					panic(fmt.Sprintf("redisstore: lua for %s: the args block names no number", name))
				}
				f.args = strings.Fields(fields[1])
				for _, a := range f.args {
					if _, ok := argPlace[a]; !ok {
						panic(fmt.Sprintf("redisstore: lua for %s: the args block names %q", name, a))
					}
				}
			}
			f.blocks[cur] = ""
			continue
		}
		if cur != "" {
			f.blocks[cur] += line
		}
	}
	for _, b := range blockNames {
		if strings.TrimSpace(f.blocks[b]) == "" {
			panic(fmt.Sprintf("redisstore: lua for %s: no %q block", name, b))
		}
	}
	if !strings.Contains(f.blocks["read"], "@BAD@") {
		panic(fmt.Sprintf("redisstore: lua for %s: the read block has no @BAD@", name))
	}
	return f
}

// A stateLayout is one layout of an algorithm's state in binary: a tag
// byte, then its numbers, each a little-endian IEEE 754 double (struct's
// "d"; every number a state holds is an integer below 2^53, which a double
// holds exactly, and the script's numbers are doubles already). The tag is
// never an ASCII digit, which every text state starts with, and says which
// algorithm and layout wrote the state, so that a key holding another
// algorithm's state, or another layout, is read as a value floodgate did
// not write, like any foreign value. A state is read as binary only when
// its length is exactly its layout's, so struct.unpack never runs past the
// end of a value (it would raise, and a raised error in a coalesced call
// would fail every request of the call, not just this one).
type stateLayout struct {
	name   string // as in the slots: @IS name@, @UNPACK name@, @PACK name@
	tag    byte
	fields int  // the numbers of the binary layout
	text   int  // how many of them, the first, the text layout has
	older  bool // an older build's layout: read, never written (no @PACK)
}

// stateLayouts are the binary layouts, tagged with the algorithm's value
// (plus 0x10 for the buckets' layouts with reservation bookkeeping, plus
// 0x40 for the buckets' layouts that end with the time their key's TTL
// ends, E; see ttlEnd). The text layouts they stand for are in each
// algorithm's file. The buckets' layouts without E are those of the
// builds before it was recorded, still read.
var stateLayouts = []stateLayout{
	{"fw", byte(floodgate.FixedWindow), 3, 2, false},         // T N W (text: T N)
	{"sw", byte(floodgate.SlidingWindow), 4, 3, false},       // T N P W (text: T N P)
	{"tb", 0x40 | byte(floodgate.TokenBucket), 3, 2, false},  // T N E (text: T N)
	{"tbr", 0x50 | byte(floodgate.TokenBucket), 6, 5, false}, // T N H A R E (text: T N H A R)
	{"gc", 0x40 | byte(floodgate.GCRA), 3, 2, false},         // T L E (text: T L)
	{"gcr", 0x50 | byte(floodgate.GCRA), 5, 4, false},        // T H A R E (text: T H A R)
	{"qt", byte(floodgate.Quota), 3, 3, false},               // T N E
	{"tb0", byte(floodgate.TokenBucket), 2, 2, true},         // T N
	{"tbr0", 0x10 | byte(floodgate.TokenBucket), 5, 5, true}, // T N H A R
	{"gc0", byte(floodgate.GCRA), 2, 2, true},                // T L
	{"gcr0", 0x10 | byte(floodgate.GCRA), 4, 4, true},        // T H A R
}

// stateNumber is struct's format of one number of a binary state.
const stateNumber = "d"

// size is the length in bytes of l's binary state.
func (l stateLayout) size() int { return 1 + 8*l.fields }

// slotFiller fills the state layouts' slots (see fragment) for a script
// that writes format.
func slotFiller(format StateFormat) []string {
	var r []string
	for _, l := range stateLayouts {
		nums := strings.Repeat(stateNumber, l.fields)
		r = append(r,
			"@IS "+l.name+"@", fmt.Sprintf("(#v == %d and sbyte(v) == %d)", l.size(), l.tag),
			"@UNPACK "+l.name+"@", fmt.Sprintf("sunpack('<%s', v, 2)", nums))
		if l.older {
			continue
		}
		if format == TextState {
			// string.format ignores the arguments past its format's: the
			// numbers only the binary layout has.
			r = append(r, "@PACK "+l.name+"@(", fmt.Sprintf("sfmt('%s', ", strings.TrimSpace(strings.Repeat("%d ", l.text))))
		} else {
			r = append(r, "@PACK "+l.name+"@(", fmt.Sprintf("spack('<B%s', %d, ", nums, l.tag))
		}
	}
	return r
}

// fill returns block with its slots filled, for a script that writes
// format.
func (f *fragment) fill(format StateFormat, block, bad, reserving string) string {
	return strings.NewReplacer(append(slotFiller(format), "@BAD@", bad, "@RESERVING@", reserving, "@TTL END@", ttlEnd(format))...).Replace(f.blocks[block])
}

// ttlEnd is the buckets' @TTL END@: where a token bucket's or GCRA's step
// block, having set ttl (µs, the life its new state needs, before
// MIN_TTL and TTL_SLACK) at now, decides the key's TTL from te, the time
// (µs, at the clock of the request that set it) at which the key's TTL
// ends as its state records it (nil: not recorded). A bucket's state
// stops mattering at a time, its full time, after which it decides
// exactly as an absent key does (a TAT in the past, a full bucket), so a
// TTL that ends later is never wrong, only longer: when te is no earlier
// than the end the new state needs, the key's TTL is kept (keep), as the
// windows keep theirs. Otherwise, in binary, the TTL written is the life
// needed plus as much again, at most the policy's window w more (a key
// left idle outlives its state by at most w), and te becomes its end, so
// the writes of the following requests keep it until the state needs
// longer. In text, which does not record te, the TTL written is the one
// needed. It leaves ttl at least MIN_TTL.
func ttlEnd(format StateFormat) string {
	keep := `      if ttl < MIN_TTL then
        ttl = MIN_TTL
      end
      if te and now + ttl + TTL_SLACK <= te then
        keep = true -- the key's TTL ends late enough
`
	if format == TextState {
		return keep + "      end\n"
	}
	return keep + `      else
        local more = ttl + TTL_SLACK -- the TTL written: the life needed twice, ...
        if more > w then
          more = w -- ... at most the window more
        end
        ttl = ttl + more
        te = now + ttl + TTL_SLACK
      end
`
}

// The @BAD@ of the fast scripts: this request (or decision) fails alone.
const badFast = "code, msg = -1, 'ERR floodgate: key ' .. key .. ' holds a value floodgate did not write'\n        break"

// argPlace is where each number an args block may name is among a
// request's seven (now, then the six of layer_args: algorithm, limit,
// window, burst, max delay, cost), as ARGV holds them in the calls of
// several requests and as frame.buildLone packs them.
var argPlace = map[string]int{"now": 0, "limit": 2, "w": 3, "b": 4, "md": 5, "cost": 6}

// argReaders read each number an args block may name in a call of
// several requests (see fast_head.lua: ai, nw, cs, shared and P): from
// the shared policy arguments when the call has them, else from the
// request's own, with the usual values compared as strings first (a
// burst or max delay of 0, a cost of 1) to skip strtod.
var argReaders = map[string]string{
	"now":   "tonumber(ARGV[nw])",
	"limit": "(shared and P[3] or tonumber(ARGV[ai + 3]))",
	"w":     "(shared and P[4] or tonumber(ARGV[ai + 4]))",
	"b":     "(shared and P[5] or ARGV[ai + 5] == '0' and 0 or tonumber(ARGV[ai + 5]))",
	"md":    "(shared and P[6] or ARGV[ai + 6] == '0' and 0 or tonumber(ARGV[ai + 6]))",
	"cost":  "(ARGV[cs] == '1' and 1 or tonumber(ARGV[cs]))",
}

// argsSource is f's args block for a call of several requests (lone
// false) or for a lone request, whose one argument a holds its numbers
// packed (see loneArgSize), with the reading of its numbers in front: in
// a call of several, from the request's record at ai in A when the call
// is packed (records laid out as a lone request's argument), else from
// ARGV with argReaders.
func (f *fragment) argsSource(lone bool) string {
	var b strings.Builder
	other := fmt.Sprintf("tag ~= %d", f.algo)
	if lone {
		fmt.Fprintf(&b, "    if #a ~= %d then\n      code, msg = -2, 'ERR floodgate: bad arguments for layer 1'\n      break\n    end\n", f.loneArgSize())
		fmt.Fprintf(&b, "    local tag, %s = sunpack('<B%s', a)\n", strings.Join(f.args, ", "), strings.Repeat(stateNumber, len(f.args)))
	} else {
		// tag: the request's algorithm as a number, or (decimal layouts)
		// false when it is not this one's.
		r := make([]string, len(f.args))
		for i, a := range f.args {
			r[i] = argReaders[a]
		}
		names := strings.Join(f.args, ", ")
		fmt.Fprintf(&b, "    local tag, %s\n", names)
		fmt.Fprintf(&b, "    if packed then\n      tag, %s = sunpack('<B%s', A, ai)\n", names, strings.Repeat(stateNumber, len(f.args)))
		fmt.Fprintf(&b, "    else\n      tag, %s =\n        (shared and P[2] or ARGV[ai + 2]) == '%d' and %d,\n        %s\n    end\n",
			names, f.algo, f.algo, strings.Join(r, ",\n        "))
	}
	b.WriteString(strings.ReplaceAll(f.blocks["args"], "@OTHER ALGORITHM@", other))
	return b.String()
}

// loneArgSize is the length in bytes of a lone request's argument for
// f's algorithm: the algorithm as a byte, then the numbers f's args block
// names, in its order, each a little-endian double (struct's "d", like
// the states' numbers: every one is an integer below 2^53).
func (f *fragment) loneArgSize() int { return 1 + 8*len(f.args) }

// wait is the last integer of f's reply: the retry, or for GCRA's
// shaping the delay when admitted.
func (f *fragment) wait() string {
	if strings.Contains(f.blocks["step"], "delay =") {
		return "ok and delay or retry"
	}
	return "retry"
}

// fastPX sets px, the PX (ms) of a new state val, or -1 to keep the key's
// TTL, in the fast scripts.
const fastPX = `    if val then -- written by the tail
      if ttl < MIN_TTL then
        ttl = MIN_TTL
      end
      ttl = ttl + TTL_SLACK + 999
      px = (ttl - fmod(ttl, 1000)) / 1000
      if keep then
        px = -1 -- the key's TTL already ends where this one would
      end
    end
`

// fastSource is the single-layer script of f's algorithm, writing
// format: fast_head.lua with loneSource in place of its @LONE@, the
// blocks, fast_tail.lua, fast_end.lua.
func (f *fragment) fastSource(format StateFormat) string {
	var b strings.Builder
	if strings.Count(luaFastHead, "--@LONE@\n") != 1 {
		panic("redisstore: fast_head.lua has no @LONE@")
	}
	head := strings.ReplaceAll(luaFastHead, "@PACKED SIZE@", fmt.Sprint(f.loneArgSize()))
	b.WriteString(strings.Replace(head, "--@LONE@\n", f.loneSource(format), 1))
	fmt.Fprintf(&b, "    -- %s (lua/%s.lua), assembled by redisstore/assemble.go\n", f.algo, f.algo)
	b.WriteString(f.argsSource(false))
	b.WriteString("    if type(v) == 'table' then\n      code, msg = -1, v.err\n      break\n    end\n")
	b.WriteString(f.fill(format, "read", badFast, "false"))
	b.WriteString("    local ok, reason, rem, reset, retry, delay, ttl, keep = false, 1, 0, 0, 0, 0\n")
	b.WriteString(f.fill(format, "step", badFast, "false"))
	b.WriteString(fastPX)
	fmt.Fprintf(&b, "    reply[ri + 1], reply[ri + 2], reply[ri + 3], reply[ri + 4] = reason, rem, reset, %s\n", f.wait())
	b.WriteString(luaFastTail)
	b.WriteString(luaFastEnd)
	return b.String()
}

// loneSource is the section of f's single-layer script that decides a
// lone request (see fast_head.lua): the same blocks, read from the packed
// argument, with no loop around them, and its compactWidth integers
// replied packed in one string (see decodeLone).
func (f *fragment) loneSource(format StateFormat) string {
	var b strings.Builder
	fmt.Fprintf(&b, "if #ARGV == 1 and #KEYS == 1 then -- %s (lua/%s.lua), assembled by redisstore/assemble.go\n", f.algo, f.algo)
	b.WriteString("  local key, a = KEYS[1], ARGV[1]\n")
	b.WriteString("  local code, msg, val, px, v\n")
	b.WriteString("  local ok, reason, rem, reset, retry, delay, ttl, keep = false, 1, 0, 0, 0, 0\n")
	b.WriteString("  repeat -- break ends the request early, with an error\n")
	b.WriteString(f.argsSource(true))
	b.WriteString("    v = redis.pcall('GET', key)\n")
	b.WriteString("    if type(v) == 'table' then\n      code, msg = -1, v.err\n      break\n    end\n")
	b.WriteString(f.fill(format, "read", badFast, "false"))
	b.WriteString(f.fill(format, "step", badFast, "false"))
	b.WriteString(fastPX)
	b.WriteString("  until true\n")
	b.WriteString("  if code then\n    return redis.error_reply(msg)\n  end\n")
	b.WriteString("  if val then\n")
	b.WriteString(indent(writeState, "    "))
	b.WriteString("  end\n")
	fmt.Fprintf(&b, "  return spack('<%s', reason, rem, reset, %s)\nend\n", strings.Repeat(stateNumber, compactWidth), f.wait())
	return b.String()
}

// writeState is the Lua of a lone request's (or lone decision's) write
// of val, the new state of key, whose stored value is v (false: no key),
// with px (ms, or -1: keep the key's TTL; see fast_head.lua): over a value
// of its length, in place.
const writeState = `if px > 0 then
  redis.call('SET', key, val, 'PX', sfmt('%d', px))
elseif #val == #v then -- the key's TTL kept, its value overwritten in place
  redis.call('SETRANGE', key, '0', val)
else
  redis.call('SET', key, val, 'KEEPTTL')
end
`

// layersSource is the layered script writing format: fast_layers.lua with
// its regions copied into its lone section (copyRegions), writeState in
// place of its @WRITE@, and one branch per algorithm in place of each
// @STEPS@ (the loop's and the lone section's).
func layersSource(format StateFormat) string {
	var b strings.Builder
	for i, f := range fragments {
		kw := "elseif"
		if i == 0 {
			kw = "if"
		}
		fmt.Fprintf(&b, "          %s algo == %d then -- %s (lua/%s.lua)\n", kw, f.algo, f.algo, f.algo)
		b.WriteString(indent(f.fill(format, "read", badFast, "false")+f.fill(format, "step", badFast, "false"), "      "))
	}
	b.WriteString("          end\n")
	src := copyRegions(luaFastLayers)
	if strings.Count(src, "          --@STEPS@\n") != 2 || strings.Count(src, "          --@WRITE@\n") != 1 {
		panic("redisstore: fast_layers.lua: want @STEPS@ in its loop and its lone section, and one @WRITE@")
	}
	src = strings.Replace(src, "          --@WRITE@\n", indent(writeState, "          "), 1)
	return strings.ReplaceAll(src, "          --@STEPS@\n", b.String()) + luaFastEnd
}

// copyRegions returns src (a frame) with each of its regions, the lines
// between "--@ name" and "--@ end name", copied in place of the line
// "--@NAME@", and the regions' marker lines removed: the layered script's
// lone section decides with its loop's text (fast_layers.lua). A region
// unclosed, repeated or never copied is a programming error caught by
// every test of the package: it panics at init.
func copyRegions(src string) string {
	regions := map[string]string{}
	var frame strings.Builder
	cur := ""
	for line := range strings.Lines(src) {
		t := strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(t, "--@ end "); ok {
			if name != cur {
				panic(fmt.Sprintf("redisstore: region %q ends inside %q", name, cur))
			}
			cur = ""
			continue
		}
		if name, ok := strings.CutPrefix(t, "--@ "); ok {
			if _, dup := regions[name]; dup || cur != "" {
				panic(fmt.Sprintf("redisstore: region %q twice, or inside %q", name, cur))
			}
			cur, regions[name] = name, ""
			continue
		}
		if cur != "" {
			regions[cur] += line
		}
		frame.WriteString(line)
	}
	if cur != "" {
		panic(fmt.Sprintf("redisstore: region %q not closed", cur))
	}
	var b strings.Builder
	used := map[string]bool{}
	for line := range strings.Lines(frame.String()) {
		t := strings.TrimSpace(line)
		if slot, ok := strings.CutPrefix(t, "--@"); ok && len(slot) > 1 && strings.HasSuffix(slot, "@") {
			name := strings.ToLower(strings.TrimSuffix(slot, "@"))
			if r, ok := regions[name]; ok {
				b.WriteString(r)
				used[name] = true
				continue
			}
		}
		b.WriteString(line)
	}
	for name := range regions {
		if !used[name] {
			panic(fmt.Sprintf("redisstore: region %q copied nowhere", name))
		}
	}
	return b.String()
}

// generalFunctions are the algorithms' functions of the general script:
// per algorithm, X_read(key), which returns the state (nil when the key
// holds something else), and X_decide(key, now, limit, w, b, md, iv,
// cost, reserving), which returns ok, rem, reset, retry, delay, reason,
// ttl, val, keep, u1, u2, u3 (nil when the key holds something else).
// They write format.
func generalFunctions(format StateFormat) string {
	var b strings.Builder
	for _, f := range fragments {
		fmt.Fprintf(&b, "-- %s (lua/%s.lua), assembled by redisstore/assemble.go\n", f.algo, f.algo)
		fmt.Fprintf(&b, "local function %s_read(key)\n  local v = redis.pcall('GET', key)\n  if type(v) == 'table' then\n    return nil\n  end\n", f.name)
		b.WriteString(f.fill(format, "read", "return nil", "reserving"))
		fmt.Fprintf(&b, "  return %s\nend\n\n", f.state)
		fmt.Fprintf(&b, "local function %s_decide(key, now, limit, w, b, md, iv, cost, reserving)\n  local v = redis.pcall('GET', key)\n  if type(v) == 'table' then\n    return nil\n  end\n", f.name)
		b.WriteString(f.fill(format, "read", "return nil", "reserving"))
		b.WriteString("  local ok, reason, rem, reset, retry, delay, ttl, val, keep, u1, u2, u3 = false, 1, 0, 0, 0, 0\n")
		b.WriteString(f.fill(format, "step", "return nil", "reserving"))
		b.WriteString(f.fill(format, "reserved", "return nil", "reserving"))
		b.WriteString("  return ok, rem, reset, retry, delay, reason, ttl, val, keep, u1, u2, u3\nend\n\n")
	}
	return b.String()
}

// releaseSource is release.lua with the algorithms' release functions,
// writing format, in place of its @RELEASES@.
func releaseSource(format StateFormat) string {
	var b strings.Builder
	for _, f := range fragments {
		fmt.Fprintf(&b, "  -- %s (lua/%s.lua)\n  local function %s_release(key, cost, w, iv, b, u1, u2, u3)\n", f.algo, f.algo, f.name)
		b.WriteString(f.fill(format, "release", "return 0", "false"))
		b.WriteString("  end\n\n")
	}
	if !strings.Contains(luaRelease, "  --@RELEASES@\n") {
		panic("redisstore: release.lua has no @RELEASES@")
	}
	return strings.Replace(luaRelease, "  --@RELEASES@\n", b.String(), 1)
}

// indent prefixes every non-empty line of s with pre.
func indent(s, pre string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.TrimSpace(line) != "" {
			b.WriteString(pre)
		}
		b.WriteString(line)
	}
	return b.String()
}
