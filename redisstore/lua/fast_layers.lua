-- fast_layers.lua: the layered script's frame: the Go package puts each
-- algorithm's read and step blocks (lua/<algorithm>.lua) in place of
-- the steps slot below (redisstore/assemble.go). It decides layered decisions
-- (fixed window, sliding window, token bucket, GCRA and quota layers; a
-- decision with a sliding log layer goes
-- to the general script), the same as the general script's decide mode
-- (decide.lua) on the same state, written out flat like the single-layer
-- scripts (fast_head.lua): Redis runs a script's whole body on every call,
-- and the general script's 33 functions cost about 40,000 instructions per
-- call to create; this script defines none.
--
-- A call decides one or more independent all-or-nothing decisions, one
-- after another, in one atomic run. ARGV holds, for each decision, its
-- number of layers n, its now (Unix µs) and the six arguments of each of
-- its layers as in layer_args (algorithm, limit, window µs, burst, max
-- delay µs, cost; a quota's window and burst carry its period's start and
-- end); KEYS holds each decision's keys in the same order. When every
-- decision has the same n layers under the same policies (the usual batch:
-- one set of policies, many identities), the call may instead be 's', n,
-- the five policy arguments of each layer once, then per decision its now
-- and its n costs; or, as Go's Store sends it, 'p', n, the 5n policy
-- arguments, then one argument packing each decision's now and n costs,
-- each a little-endian double (struct's '<d'), read with one
-- struct.unpack per decision instead of 1 + n arguments Redis turns into
-- Lua strings and the script into numbers. The call's shape is checked
-- before anything is decided.
--
-- A lone decision, the usual call when decisions are not queued behind
-- others, has a layout of its own, as in the single-layer scripts: its n
-- keys and ONE argument, its numbers packed with struct ('<' then 'd'
-- for now, then per layer 'B' for the algorithm and 'ddddd' for limit,
-- window, burst, max delay and cost: 8 + 41n bytes), read with one
-- struct.unpack instead of 2 + 6n arguments Redis turns into Lua strings
-- and the script into numbers (with 'n', the parsing of the request:
-- about half of a lone three-layer decision's instructions;
-- docs/benchmarks.md). Its section, first below, decides it with the
-- same checks and passes as the loop over the decisions of the other
-- layouts (the loop's regions, between marker comments that name them,
-- which copyRegions in redisstore/assemble.go copies into the section's
-- slots of their names),
-- without the loop, the cache's deferred writes and the layouts' parsing,
-- writes each state as soon as the decision admits, and replies packed.
--
-- Each decision reads every layer's state, decides every layer at its now,
-- and writes the new states only if every layer admitted; a layer that
-- would have admitted in a denied decision reports its standing without
-- the request (a peek's numbers, marked admitted). States are read and
-- written through a cache for the call: a key that several decisions of
-- the call share (a global edge layer) is read once and written once, at
-- the end, with its last value and TTL (or, for a state that keeps its
-- key's TTL, in place or with SET KEEPTTL: see fast_head.lua). (Redis 7.0 counts a PX from the
-- moment of the SET, so a key flushed at the end of a long call expires
-- later than if it had been written at once, by at most the call's run
-- time, far inside the TTL's one-second slack; never earlier.)
--
-- Reply: four integers per layer, decision after decision, as in the
-- single-layer scripts (fast_head.lua): reason, remaining, resetAt µs, and
-- the wait (delay when admitted, retry when not); a call of the packed
-- layout, and a lone decision sent packed, gets them packed in one
-- string, each a little-endian double, as the single-layer scripts'
-- packed calls. A decision that
-- cannot be decided writes nothing and, when the call has several, gets
-- zeros with the code -1 (a key holds a value floodgate did not write, or
-- a key of another type) or -2 (bad arguments) for every layer,
-- and the others go on; when it is the only one, the call fails with an
-- error reply instead. The Go side validated everything; the checks here
-- only keep the script from running on garbage.

local MAX_LAYERS = 16
local MAX_NOW = 4503599627370496
local MAX_LIMIT = 1099511627776
local MAX_SPAN = 1125899906842624
local MIN_WINDOW, MAX_WINDOW = 1000, 34560000000000
local MIN_TTL = 1000
local TTL_SLACK = 1000000
local QUOTA_GRACE = 3600000000
local fmod, floor, ceil, sfmt, smatch = math.fmod, math.floor, math.ceil, string.format, string.match
local sbyte, spack, sunpack = string.byte, struct.pack, struct.unpack -- the states' binary layouts
local srep, unpack, concat = string.rep, unpack, table.concat -- the packed layout's reply
-- KEYS and ARGV are globals, and every global read is a table lookup:
-- read through locals, each costs Redis a few hundred instructions less.
local KEYS, ARGV = KEYS, ARGV

local nk, na = #KEYS, #ARGV
local cache = {} -- values read or written (false: no key), by key
local reply -- four integers per layer, 4 nk in all
local P -- this decision's layer arguments, seven per layer (algorithm, limit, window, burst, max delay, cost, interval)
local W -- per layer, what to write: PX ms (0: nothing; -1: keep the key's TTL) and the new state
-- A call of three layers or fewer in all (a lone decision, the usual
-- kind) gets its tables made at their size: growing a table one slot at a
-- time reallocates it at every power of two, about a tenth of such a
-- call. Redis reads a reply up to its first nil, so the reply's unused
-- slots are cut off by one.
if nk <= 3 then
  reply = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  reply[4 * nk + 1] = nil
  P = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  W = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
else
  reply, P, W = {}, {}, {}
end

if na == 1 then -- a lone decision, packed (see above)
  local A, n, k, r = ARGV[1], nk, 0, 0
  if n < 1 or n > MAX_LAYERS or #A ~= 8 + 41 * n then
    return redis.error_reply('ERR floodgate: bad call: want n keys and one argument of 8 + 41n packed bytes')
  end
  local C = {sunpack('<d' .. srep('Bddddd', n), A)} -- now, then per layer algorithm, limit, window, burst, max delay, cost
  local now = C[1]
  local code, msg
  repeat -- break ends the decision early, with an error
    --@NOW@
    for i = 1, n do
      local c, b = 6 * i - 4, 7 * i - 7 -- where layer i's numbers are in C, and go in P
      local cost = C[c + 5]
      --@COST@
      local algo, limit, w, bu, md, iv = C[c], C[c + 1], C[c + 2], C[c + 3], C[c + 4]
      do
        --@POLICY@
      end
      --@PERIOD@
      P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5], P[b + 6], P[b + 7] = algo, limit, w, bu, md, cost, iv
    end
    if code then
      break
    end
    --@PASSES@
    if all then
      for i = 1, n do
        local o = 7 * i - 7
        local px = W[o + 1]
        if px ~= 0 then
          local key, val = KEYS[i], W[o + 2]
          local v = cache[key] -- the stored value
          --@WRITE@
        end
      end
    end
  until true
  if code then
    return redis.error_reply(msg)
  end
  return spack('<' .. srep('d', 4 * n), unpack(reply, 1, 4 * n))
end

local packed = ARGV[1] == 'p'
local shared = packed or ARGV[1] == 's'
local sn -- the number of layers of every decision, in the shared layout
local a, k, nd = 1, 0, 0
local A, CF, C -- the packed layout's argument, the format of one decision's numbers, and those numbers
if shared then
  sn = tonumber(ARGV[2])
  if not sn or sn % 1 ~= 0 or sn < 1 or sn > MAX_LAYERS or nk % sn ~= 0 then
    return redis.error_reply('ERR floodgate: bad call: want s (or p), n, 5n policy arguments, then now and n costs per decision')
  end
  nd = nk / sn
  if packed then
    A = ARGV[na]
    if nd < 1 or na ~= 3 + 5 * sn or #A ~= 8 * (1 + sn) * nd then
      return redis.error_reply('ERR floodgate: bad call: want p, n, 5n policy arguments, then now and n costs per decision packed')
    end
    CF = '<' .. srep('d', 1 + sn)
  elseif nd < 1 or na ~= 2 + 5 * sn + nd * (1 + sn) then
    return redis.error_reply('ERR floodgate: bad call: want s, n, 5n policy arguments, then now and n costs per decision')
  end
  for i = 1, sn do
    if ARGV[5 * i - 2] == '2' then
      return redis.error_reply('ERR floodgate: bad call: a sliding log layer')
    end
  end
  a = 3 + 5 * sn
  if packed then
    a = 1 -- where the decision's numbers start in A
  end
else
  while a <= na do
    local n = tonumber(ARGV[a])
    if not n or n % 1 ~= 0 or n < 1 or n > MAX_LAYERS or a + 1 + 6 * n > na or k + n > nk then
      return redis.error_reply('ERR floodgate: bad call: want, per decision, n, now and 6n layer arguments')
    end
    for i = 1, n do
      if ARGV[a + 6 * i - 4] == '2' then
        return redis.error_reply('ERR floodgate: bad call: a sliding log layer')
      end
    end
    a, k, nd = a + 2 + 6 * n, k + n, nd + 1
  end
  if nd < 1 or k ~= nk or a ~= na + 1 then
    return redis.error_reply('ERR floodgate: bad call: want, per decision, n, now and 6n layer arguments')
  end
  a = 1
end

local px_of, dirty = {}, {} -- see above: the deferred PX, and the keys to write, each followed by its stored value's length (-1: no key)
local PP = {} -- the previous decision's layer arguments (as P)
if nk <= 3 then
  PP = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
end
local pa, pn -- where the previous decision's layer arguments started, and its number of layers
k = 0
local r = 0
for _ = 1, nd do
  local n, now
  if packed then
    C = {sunpack(CF, A, a)} -- now, then the n costs
    n, now = sn, C[1]
  elseif shared then
    n, now = sn, tonumber(ARGV[a])
  else
    n, now = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  end
  local code, msg
  repeat -- break ends this decision early, with an error code
    --@ now
    if not now or now % 1 ~= 0 or now < 0 or now > MAX_NOW then
      code, msg = -2, 'ERR floodgate: bad now'
      break
    end
    --@ end now

    -- The layers' arguments, checked. The five policy arguments are taken
    -- from the previous decision's when they are the very strings it had
    -- (Lua strings are interned, so comparing them is cheap), as in a
    -- call of many decisions under one set of policies; in the shared
    -- layout, once the call's first good decision has parsed them, only
    -- the costs change (every Lua operation counts: the full check costs
    -- Redis about 3,000 instructions a layer).
    for i = 1, n do
      local x, cx, b = a + 6 * i - 4, a + 6 * i + 1, 7 * i - 7 -- where layer i's policy arguments and cost are
      if shared then
        x, cx = 5 * i - 2, a + i
      end
      local cost
      if packed then
        cost = C[i + 1]
      else
        local cs = ARGV[cx]
        cost = cs == '1' and 1 or tonumber(cs) -- most requests cost 1: skip strtod
      end
      --@ cost
      if not cost or cost % 1 ~= 0 or cost < 0 or cost > MAX_LIMIT then
        -- checked first, as layer_args reports bad arguments before a bad rate
        code, msg = -2, sfmt('ERR floodgate: bad arguments for layer %d', i)
        break
      end
      --@ end cost
      local q = not shared and pa and pn == n and pa + 6 * i - 6 -- the previous decision's arguments (per-decision layout)
      local algo, limit, w, bu, md, iv
      if shared and pa then
        algo, limit, w, bu, md, iv = P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5], P[b + 7]
      elseif q and ARGV[x] == ARGV[q] and ARGV[x + 1] == ARGV[q + 1] and ARGV[x + 2] == ARGV[q + 2] and
        ARGV[x + 3] == ARGV[q + 3] and ARGV[x + 4] == ARGV[q + 4] then
        algo, limit, w, bu, md, iv = PP[b + 1], PP[b + 2], PP[b + 3], PP[b + 4], PP[b + 5], PP[b + 7]
      else
        -- tonumber costs Redis about 1,500 instructions (strtod): the
        -- algorithm is read by comparing strings, and the usual zero burst
        -- and max delay are taken as they are.
        local sa, sb, sm = ARGV[x], ARGV[x + 3], ARGV[x + 4]
        algo = sa == '1' and 1 or sa == '3' and 3 or sa == '4' and 4 or sa == '5' and 5 or sa == '6' and 6 or nil
        limit, w = tonumber(ARGV[x + 1]), tonumber(ARGV[x + 2])
        bu = sb == '0' and 0 or tonumber(sb)
        md = sm == '0' and 0 or tonumber(sm)
        --@ policy
        if not (algo and limit and w and bu and md) or
          algo % 1 ~= 0 or limit % 1 ~= 0 or w % 1 ~= 0 or bu % 1 ~= 0 or md % 1 ~= 0 or
          algo < 1 or algo > 6 or algo == 2 or limit < 1 or limit > MAX_LIMIT or md < 0 or md > MAX_SPAN or
          (algo == 6 and (w < 0 or w > MAX_NOW or bu < 0 or bu > MAX_NOW)) or
          (algo ~= 6 and (w < MIN_WINDOW or w > MAX_WINDOW or bu < 0 or bu > MAX_LIMIT)) then
          code, msg = -2, sfmt('ERR floodgate: bad arguments for layer %d', i)
          break
        end
        iv = 0
        if algo == 4 or algo == 5 then
          iv = (w - fmod(w, limit)) / limit
          if bu == 0 then
            bu = limit
          end
          if iv < 1 or bu * iv > MAX_SPAN then
            code, msg = -2, sfmt('ERR floodgate: bad rate for layer %d', i)
            break
          end
        end
        --@ end policy
      end
      --@ period
      if algo == 6 and not (w <= now and now < bu) then
        code, msg = -2, sfmt('ERR floodgate: bad quota period for layer %d', i)
        break
      end
      --@ end period
      if shared and pa then
        P[b + 6] = cost
      else
        P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5], P[b + 6], P[b + 7] = algo, limit, w, bu, md, cost, iv
      end
    end
    if code then
      break
    end

    --@ passes
    -- Pass 1 decides every layer; if one denies, pass 2 gives each layer
    -- that would have admitted a request its standing (cost 0, nothing
    -- consumed). The states are the decision's own: nothing is written
    -- before both passes.
    local all = true
    for pass = 1, 2 do
      for i = 1, n do
        local pb, j, o = 7 * i - 7, r + 4 * i - 4, 7 * i - 7
        if pass == 1 or (reply[j + 1] == 0 and P[pb + 6] > 0) then
          local algo, limit, w, b, md, iv = P[pb + 1], P[pb + 2], P[pb + 3], P[pb + 4], P[pb + 5], P[pb + 7]
          local cost = P[pb + 6]
          if pass == 2 then
            cost = 0
          end
          local key = KEYS[k + i]
          local v = cache[key]
          if v == nil then
            v = redis.pcall('GET', key) -- a key of another type fails this decision only
            if type(v) == 'table' then
              code, msg = -1, 'ERR floodgate: key ' .. key .. ' holds a value floodgate did not write'
              break
            end
            cache[key] = v
          end
          local now = now -- the fragments may move it forward, for this layer only
          local ok, reason, rem, reset, retry, delay, ttl, val, keep = false, 1, 0, 0, 0, 0
          --@STEPS@
          if pass == 1 then
            reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4] = reason, rem, reset, ok and delay or retry
            W[o + 1] = 0
            if not ok then
              all = false
            elseif val then
              if ttl < MIN_TTL then
                ttl = MIN_TTL
              end
              ttl = ttl + TTL_SLACK + 999
              W[o + 1], W[o + 2] = (ttl - fmod(ttl, 1000)) / 1000, val
              if keep then
                W[o + 1] = -1
              end
            end
          else
            reply[j + 2], reply[j + 3], reply[j + 4] = rem, reset, 0
          end
        end
      end
      if code or all then
        break
      end
    end
    if code then
      break
    end
    --@ end passes

    if all then
      for i = 1, n do
        local o = 7 * i - 7
        local px = W[o + 1]
        if px ~= 0 then
          local key, val = KEYS[k + i], W[o + 2]
          local old = px_of[key]
          if old == nil then
            local d, sv = #dirty, cache[key] -- not written yet in this call: the stored value
            dirty[d + 1], dirty[d + 2] = key, sv and #sv or -1
          end
          if old == nil or px > 0 then -- a -1 leaves a PX decided earlier in the call, for the same end
            px_of[key] = px
          end
          cache[key] = val
        end
      end
    end
  until true

  if code then
    if nd == 1 then
      return redis.error_reply(msg)
    end
    for x = r + 1, r + 4 * n do
      reply[x] = 0
    end
    for i = 1, n do
      reply[r + 4 * i - 3] = code
    end
    pa = nil
  else
    if not shared then -- (the shared layout keeps its one set in P)
      P, PP = PP, P
    end
    pa, pn = a + 2, n
  end
  if packed then
    a = a + 8 + 8 * n
  elseif shared then
    a = a + 1 + n
  else
    a = a + 2 + 6 * n
  end
  k, r = k + n, r + 4 * n
end

