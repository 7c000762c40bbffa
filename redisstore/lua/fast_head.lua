-- fast_head.lua, fast_tail.lua: the single-layer scripts' frame. The Go
-- package puts one algorithm's blocks (args, read and step, from
-- lua/<algorithm>.lua) between this head and the tail, one script per
-- algorithm (redisstore/assemble.go). Each decides
-- one-layer requests exactly as a one-layer call of the general script
-- (decide.lua) would on the same state, but written out flat: Redis runs a
-- script's whole body on every call, and every function a script defines
-- is created again each time, so the single-layer scripts define none.
--
-- A call decides one or more independent requests, one after another, in
-- one atomic run: KEYS[i] is request i's key; ARGV holds seven arguments
-- per request: now (Unix µs), then the layer's six arguments as in
-- layer_args (algorithm, limit, window µs, burst, max delay µs, cost). A
-- call of two requests or more under one policy may instead send the five
-- policy arguments once (algorithm, limit, window, burst, max delay), then
-- now and cost per request: Redis turns every argument into a Lua string,
-- and the script every number it reads into a number, at a cost that is a
-- large part of a request's. The Go side validated everything; the checks
-- here only keep the script from running on garbage.
--
-- A call of two requests or more may also send them packed, as Go's
-- Store does: one argument, each request's record after the other, a
-- record being what a lone request's argument holds (below). Such a call
-- is answered packed too: its integers, four per request, each a
-- little-endian double ('<d'), in one string. Against the shared layout,
-- this saves Redis about 3,000 instructions per request (callgrind,
-- docs/benchmarks.md): the two arguments it no longer turns into Lua
-- strings, and the strtod of now.
--
-- Any of these layouts but the lone one may end with 'h' (below).
--
-- A lone request, the usual call when decisions are not queued behind
-- others, has a third layout: one key and one argument, the request's
-- numbers packed in binary (struct's '<B' then one 'd' per number: the
-- algorithm, then the numbers its args block names, in that order; see
-- redisstore/assemble.go). Redis turns each argument into a Lua string
-- and the script each number into a number with tonumber (glibc's
-- strtod), about 1,200 and 1,400-2,000 instructions apiece; one
-- struct.unpack costs less than two of them. Its section is the
-- algorithm's blocks again, assembled without the loop, the cache and
-- the reply table of the calls of several requests, and it replies its
-- four integers packed in one string ('<dddd'): Redis answers a table
-- integer by integer, about 3,000 instructions more for four.
--
-- Reply (but for the packed layouts): four integers per request: the reason (0: admitted, 1: limited,
-- 2: the cost exceeds the capacity), remaining, resetAt µs, and the wait
-- in µs: the delay when admitted (only GCRA's max delay gives one), the
-- retry when not. (decide.lua's six -- allowed, remaining, resetAt, retry,
-- delay, reason -- say the same in two more integers, and Redis spends
-- about 1,000 instructions on each integer of a reply.) A request that
-- cannot be decided writes nothing and, when the call has several, gets
-- the code -1 (its key holds a value floodgate did not write, or a key of
-- another type) or -2 (bad arguments) in place of the reason, with zeros,
-- and the others go on; when it is the only one, the call fails with an
-- error reply instead.
--
-- The blocks run once per request inside `repeat ... until true`, with the
-- request's argument places ai (its seven), nw (now) and cs (cost), P (the
-- shared policy arguments, when shared), its reply place ri, its key and
-- the key's value v: they either fill reply[ri + 1 .. ri + 4], setting val
-- and px when there is a state to write, or set code and msg and break.
--
-- px is the state's TTL in ms, or -1 to keep the key's TTL. A state
-- whose stored predecessor has the same period (a quota's start and end)
-- or the same window (a binary window state's start and length) already
-- expires where the new state would, and a bucket's (token bucket, GCRA)
-- whose predecessor records a TTL that ends no earlier than the new state
-- needs expires late enough (see ttlEnd in redisstore/assemble.go), so
-- SET KEEPTTL writes it without the
-- expiry bookkeeping of SET PX (4,800 Redis instructions against about
-- 11,000); and when the new state is as long as the stored value (a
-- binary state over one of its layout), SETRANGE key 0 overwrites the
-- value in place, which keeps the TTL as well, about 2,000 instructions
-- less again (no options to parse, no new value object; the number 0 is
-- sent as the string '0', which Redis does not have to format). Its TTL was set by the period's or window's first write, at
-- that writer's clock; like every TTL it is safe for callers whose clocks
-- lag by up to TTL_SLACK. A text window state does not say its window's
-- length, so a policy whose window grew under the same name could meet a
-- state of the old window that starts where its own window does, and
-- keeping that key's shorter TTL would lose counts: over a text state the
-- TTL is always written.

local MAX_NOW = 4503599627370496
local MAX_LIMIT = 1099511627776
local MAX_SPAN = 1125899906842624
local MIN_WINDOW, MAX_WINDOW = 1000, 34560000000000
local MIN_TTL = 1000
local TTL_SLACK = 1000000
local QUOTA_GRACE = 3600000000
local fmod, floor, ceil, sfmt, smatch = math.fmod, math.floor, math.ceil, string.format, string.match
local sbyte, spack, sunpack = string.byte, struct.pack, struct.unpack -- the states' binary layouts
local srep, unpack, concat = string.rep, unpack, table.concat -- a packed call's reply
-- KEYS and ARGV are globals, and every global read is a table lookup:
-- read through locals, each costs Redis a few hundred instructions less.
local KEYS, ARGV = KEYS, ARGV

-- A lone request (one key, one argument: its numbers packed) is decided
-- here, and the script returns; calls of the layouts below go on.
--@LONE@

local nk, na = #KEYS, #ARGV
-- A trailing 'h' says some requests of the call share a key (one hot
-- identity, a global limit). Such a key is then read once and written
-- once: cache holds every key's value as read or last decided (false: no
-- key), px_of the PX in ms (or -1) of the keys decided, dirty those keys
-- in the order first decided, each followed by the length of its stored
-- value (which picks SETRANGE, below), and the tail writes each at the
-- end. A
-- script runs atomically, so the stored values are those of writing each
-- at once; a PX counts from the SET, so such a key expires later by at
-- most the call's run time, far inside the TTL's one-second slack, never
-- earlier. Without the 'h', reads and writes go straight to Redis.
local hot = ARGV[na] == 'h'
local cache, px_of, dirty -- dirty: each key followed by its stored value's length (-1: no key)
if hot then
  na = na - 1
  cache, px_of, dirty = {}, {}, {}
end
-- A call of several requests packed (see above): one argument, each
-- request's record of @PACKED SIZE@ bytes in turn, read in place with
-- struct.unpack. Its length is checked here, so that no unpack runs past
-- its end (struct.unpack raises, and an error raised half-way would stop
-- the call after some writes).
local packed, A = nk > 1 and na == 1
if packed then
  A = ARGV[1]
  if #A ~= @PACKED SIZE@ * nk then
    return redis.error_reply('ERR floodgate: bad call: want @PACKED SIZE@ packed bytes per key')
  end
end
local shared = not packed and nk > 1 and na == 5 + 2 * nk
if nk < 1 or not packed and not shared and na ~= 7 * nk then
  return redis.error_reply('ERR floodgate: bad call: want 1 or more keys, 7 arguments per key, 5 + 2 per key or @PACKED SIZE@ packed bytes per key')
end
local P -- the shared policy arguments, by their place (2..6) in a request's seven
if shared then
  P = {}
  P[2] = ARGV[1]
  for k = 3, 6 do
    P[k] = tonumber(ARGV[k - 1])
    if not P[k] then
      return redis.error_reply('ERR floodgate: bad shared arguments')
    end
  end
end
-- A lone request's reply is made at its size: growing a table one slot at
-- a time reallocates it at every power of two, about 5 % of such a call.
local reply
if nk == 1 then
  reply = {0, 0, 0, 0}
else
  reply = {}
end
for i = 1, nk do
  local ai, ri = 7 * i - 7, 4 * i - 4
  local nw, cs = ai + 1, ai + 7 -- where the request's now and cost are
  if packed then
    ai = @PACKED SIZE@ * i - @PACKED SIZE@ + 1 -- where the request's record starts in A
  elseif shared then
    nw = 4 + 2 * i
    cs = nw + 1
  end
  local code, msg
  -- The request's key and its value (false: no key; a table: a key of
  -- another type, which fails this request only), read through the cache
  -- in a hot call; the body checks it after the arguments. The body sets
  -- val and px (ms, or -1: keep the TTL) when the request consumed
  -- something, and the tail writes them.
  local key, v, val, px = KEYS[i]
  if hot then
    v = cache[key]
    if v == nil then
      v = redis.pcall('GET', key)
      if type(v) ~= 'table' then
        cache[key] = v
      end
    end
  else
    v = redis.pcall('GET', key)
  end
  repeat -- break ends this request early, with an error code
