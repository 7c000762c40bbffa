-- decide.lua: the entry point. One all-or-nothing decision over 1..16
-- layers whose keys share a slot, in one of three modes:
--
--   decide   KEYS[i] is layer i's key; ARGV[1] is now (Unix µs), then the
--            six arguments of each layer (layer_args).
--   reserve  the same, with 'reserve' appended: one slot's part of a
--            decision whose keys span several Redis Cluster slots. It
--            decides and writes exactly like decide, keeps the buckets'
--            bookkeeping, and replies, per layer, the three numbers a
--            release needs to give the reservation back.
--   probe    the same, with 'probe' appended: decides exactly like
--            decide but writes nothing, as if another layer had denied
--            (a layer that would admit reports its standing). A split
--            decision denied before its last part was sent asks that part
--            for its results this way.
--   release  ARGV[1] is 'release' (or 'bare'): see release.lua.
--
-- Phase 1 reads every layer's state and computes its result; phase 2 runs
-- only if every layer admitted and writes each consuming layer's new state
-- together with its TTL (SET PX, or ZADD + PEXPIRE), so no key exists without
-- a TTL. A denial anywhere writes nothing. The script is deterministic given
-- its arguments (no TIME, no randomness), so it replicates safely either
-- verbatim or by effects.
--
-- Reply: six integers per layer: allowed (0/1), remaining, resetAt µs,
-- retry µs, delay µs, reason; in reserve mode nine, the last three being
-- what release.lua takes back (zero where nothing was written): the window
-- or period start (fixed and sliding window, quota), the entry's time
-- (sliding log), or the bucket's full time F with its bookkeeping A and R
-- (token bucket, gcra).

-- decide_at decides one all-or-nothing decision over n layers at now: the
-- layers' keys are KEYS[k0 + 1 .. k0 + n], their six arguments each start
-- at ARGV[a0], and the reply values go to reply[r0 + 1 ..] (six per layer,
-- nine in reserve mode). It returns nil, or an error reply, having written
-- nothing, when a layer's arguments are bad or its key holds a value
-- floodgate did not write. With probe set it writes nothing in any case.
local function decide_at(k0, a0, n, now, reserve, reply, r0, probe)
  local width = reserve and 9 or 6
  local P = {} -- the layers' arguments, checked, six per layer
  for i = 1, n do
    local algo, limit, w, burst, md, cost = layer_args(a0 + 6 * i - 6, i, now)
    if not algo then
      return limit
    end
    local b = 6 * i - 6
    P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5], P[b + 6] = algo, limit, w, burst, md, cost
  end
  local pend = {} -- six per layer: PX ms (0: nothing to write; -1: keep the key's TTL), the new state, u1, u2, u3, algorithm
  local all = true
  for i = 1, n do
    local b = 6 * i - 6
    local algo, limit, w, burst, md, cost = P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5], P[b + 6]
    local key = KEYS[k0 + i]
    local ok, rem, reset, retry, delay, reason, ttl, val, keep, u1, u2, u3 = step(key, algo, limit, w, burst, md, cost, now, reserve)
    if ok == nil then
      return redis.error_reply('ERR floodgate: key ' .. key .. ' holds a value floodgate did not write')
    end
    local j = r0 + width * (i - 1)
    reply[j + 1] = ok and 1 or 0
    reply[j + 2] = rem
    reply[j + 3] = reset
    reply[j + 4] = retry
    reply[j + 5] = delay
    reply[j + 6] = reason
    local k = 6 * i - 6
    pend[k + 1], pend[k + 6] = 0, algo
    if ok then
      if cost > 0 then
        if ttl < MIN_TTL then
          ttl = MIN_TTL
        end
        ttl = ttl + TTL_SLACK
        pend[k + 1], pend[k + 2] = idiv(ttl + 999, 1000), val
        if keep then
          pend[k + 1] = -1
        end
        pend[k + 3], pend[k + 4], pend[k + 5] = u1, u2 or 0, u3 or 0
      end
    else
      all = false
    end
  end

  if probe then
    all = false
  end
  if not all then
    -- Nothing is written. A layer that would have admitted reports its
    -- standing without the request (algo.Standing): a peek's numbers,
    -- marked admitted.
    for i = 1, n do
      local j = r0 + width * (i - 1)
      local b = 6 * i - 6
      if reply[j + 1] == 1 and P[b + 6] > 0 then
        local _, rem, reset = step(KEYS[k0 + i], P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5], 0, now, false)
        reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5], reply[j + 6] = rem, reset, 0, 0, NONE
      end
    end
  end

  if all then
    for i = 1, n do
      local k = 6 * i - 6
      local px = pend[k + 1]
      if px ~= 0 then
        local key = KEYS[k0 + i]
        if pend[k + 6] == 2 then
          sl_write(key, pend[k + 3], pend[k + 4], pend[k + 5], px, P[6 * i - 3])
        elseif px > 0 then
          redis.call('SET', key, pend[k + 2], 'PX', int(px))
        else
          redis.call('SET', key, pend[k + 2], 'KEEPTTL')
        end
      end
    end
  end
  if reserve then
    -- What a release needs to give each written layer back: for the
    -- sliding log the entry's time only.
    for i = 1, n do
      local k, j = 6 * i - 6, r0 + 9 * i - 9
      local u1, u2, u3 = 0, 0, 0
      if all and pend[k + 1] ~= 0 then
        u1, u2, u3 = pend[k + 3], pend[k + 4], pend[k + 5]
        if pend[k + 6] == 2 then
          u2, u3 = 0, 0
        end
      end
      reply[j + 7], reply[j + 8], reply[j + 9] = u1, u2, u3
    end
  end
  return nil
end

local nkeys, nargv = #KEYS, #ARGV
local reserve, probe = false, false
if nargv ~= 1 + 6 * nkeys then
  -- A release's keys: its layers', its marker (none for a bare
  -- release), then (from callers that send them) each layer's release
  -- journal.
  local rn = (nargv - 3) / 9
  local m = ARGV[1] == 'release' and 1 or 0
  if (m == 1 or ARGV[1] == 'bare') and rn >= 1 and rn <= MAX_LAYERS and rn % 1 == 0 and
    (nkeys == rn + m or nkeys == 2 * rn + m) then
    local now = arg(2, 0, MAX_NOW)
    if now == nil then
      return redis.error_reply('ERR floodgate: bad now')
    end
    return release(rn, now, nkeys == 2 * rn + m, m == 1)
  end
  local mode = ARGV[nargv]
  if (mode ~= 'reserve' and mode ~= 'probe') or nargv ~= 2 + 6 * nkeys then
    return redis.error_reply('ERR floodgate: bad call: want 1..16 keys and 1+6*keys arguments')
  end
  reserve, probe = mode == 'reserve', mode == 'probe'
end
if nkeys < 1 or nkeys > MAX_LAYERS then
  return redis.error_reply('ERR floodgate: bad call: want 1..16 keys and 1+6*keys arguments')
end
local now = arg(1, 0, MAX_NOW)
if now == nil then
  return redis.error_reply('ERR floodgate: bad now')
end

local reply = {}
local err = decide_at(0, 2, nkeys, now, reserve, reply, 0, probe)
if err then
  return err
end
return reply
