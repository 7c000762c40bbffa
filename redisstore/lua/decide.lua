-- decide.lua: the entry point, one all-or-nothing decision over 1..16 layers.
--
-- KEYS[i] is layer i's key. ARGV[1] is now (Unix µs); then six arguments per
-- layer: algorithm (floodgate.Algorithm: 1 fixed window, 2 sliding log,
-- 3 sliding window, 4 token bucket, 5 gcra, 6 quota), limit, window µs,
-- burst, max delay µs, cost. For quota the window and burst slots carry the
-- calendar period's start and end (Unix µs), computed in Go.
--
-- Phase 1 reads every layer's state and computes its result; phase 2 runs
-- only if every layer admitted and writes each consuming layer's new state
-- together with its TTL (SET PX, or ZADD + PEXPIRE), so no key exists without
-- a TTL. A denial anywhere writes nothing. The script is deterministic given
-- its arguments (no TIME, no randomness), so it replicates safely either
-- verbatim or by effects.
--
-- Reply: six integers per layer: allowed (0/1), remaining, resetAt µs,
-- retry µs, delay µs, reason.

local MAX_LAYERS = 16
local MAX_NOW = 4503599627370496   -- 2^52 µs, the year 2112
local MAX_LIMIT = 1099511627776    -- 2^40, floodgate.MaxLimit and MaxCost
local MAX_SPAN = 1125899906842624  -- 2^50 µs, bound of burst × interval and max delay
local MIN_WINDOW, MAX_WINDOW = 1000, 34560000000000 -- 1ms .. 400 days
local MAX_LOG_LIMIT = 100000

-- arg returns ARGV[i] as an integer in lo..hi, or nil.
local function arg(i, lo, hi)
  local x = tonumber(ARGV[i])
  if x == nil or x ~= floor(x) or x < lo or x > hi then
    return nil
  end
  return x
end

local function bad(what, i)
  return redis.error_reply(sfmt('ERR floodgate: bad %s for layer %d', what, i))
end

local nkeys = #KEYS
if nkeys < 1 or nkeys > MAX_LAYERS or #ARGV ~= 1 + 6 * nkeys then
  return redis.error_reply('ERR floodgate: bad call: want 1..16 keys and 1+6*keys arguments')
end
local now = arg(1, 0, MAX_NOW)
if now == nil then
  return redis.error_reply('ERR floodgate: bad now')
end

-- step decides one layer: it reads the key's state and runs the
-- algorithm's step. It returns nil when the key holds a value floodgate did
-- not write. Arguments were validated by the caller.
local function step(key, algo, limit, w, burst, md, cost)
  if algo == 1 then
    local t, n = fw_read(key)
    if t then
      return fw_step(t, n, now, limit, w, cost)
    end
  elseif algo == 3 then
    local t, n, p = sw_read(key)
    if t then
      return sw_step(t, n, p, now, limit, w, cost)
    end
  elseif algo == 6 then
    local t, n = sw_read(key)
    if t then
      return qt_step(t, n, now, w, burst, limit, cost)
    end
  elseif algo == 2 then
    return sl_step(key, now, limit, w, cost)
  elseif algo == 4 then
    local t, n = tb_read(key)
    if t then
      return tb_step(t, n, now, idiv(w, limit), burst, cost)
    end
  else
    local t = gc_read(key)
    if t then
      return gc_step(t, now, idiv(w, limit), burst, md, cost)
    end
  end
  return nil
end

local reply = {}
local pend = {} -- five per layer: algorithm, state slots 1..3, PX ms (0: nothing to write)
local all = true
local params = {} -- five per layer: algorithm, limit, window, burst, max delay
for i = 1, nkeys do
  local a = 6 * i - 4
  local algo = arg(a, 1, 6)
  local limit = arg(a + 1, 1, MAX_LIMIT)
  local w, burst
  if algo == 6 then
    w, burst = arg(a + 2, 0, MAX_NOW), arg(a + 3, 0, MAX_NOW)
    if w and burst and not (w <= now and now < burst) then
      return bad('quota period', i)
    end
  else
    w, burst = arg(a + 2, MIN_WINDOW, MAX_WINDOW), arg(a + 3, 0, MAX_LIMIT)
  end
  local md = arg(a + 4, 0, MAX_SPAN)
  local cost = arg(a + 5, 0, MAX_LIMIT)
  if not (algo and limit and w and burst and md and cost) then
    return bad('arguments', i)
  end
  local key = KEYS[i]
  if algo == 2 and limit > MAX_LOG_LIMIT then
    return bad('sliding log limit', i)
  end
  if algo == 4 or algo == 5 then
    local iv = idiv(w, limit)
    if burst == 0 then
      burst = limit
    end
    if iv < 1 or burst * iv > MAX_SPAN then
      return bad('rate', i)
    end
  end
  local q = 5 * i - 5
  params[q + 1], params[q + 2], params[q + 3], params[q + 4], params[q + 5] = algo, limit, w, burst, md
  local ok, rem, reset, retry, delay, reason, s1, s2, s3, ttl = step(key, algo, limit, w, burst, md, cost)
  if ok == nil then
    return redis.error_reply('ERR floodgate: key ' .. key .. ' holds a value floodgate did not write')
  end
  local j = 6 * i - 6
  reply[j + 1] = ok and 1 or 0
  reply[j + 2] = rem
  reply[j + 3] = reset
  reply[j + 4] = retry
  reply[j + 5] = delay
  reply[j + 6] = reason
  local k = 5 * i - 5
  pend[k + 1] = algo
  pend[k + 5] = 0
  if ok then
    if cost > 0 then
      if ttl < MIN_TTL then
        ttl = MIN_TTL
      end
      ttl = ttl + TTL_SLACK
      pend[k + 2], pend[k + 3], pend[k + 4] = s1, s2, s3
      pend[k + 5] = idiv(ttl + 999, 1000)
    end
  else
    all = false
  end
end

if not all then
  -- Nothing is written. A layer that would have admitted reports its
  -- standing without the request (floodgate.Standing): a peek's numbers,
  -- marked admitted.
  for i = 1, nkeys do
    local j = 6 * i - 6
    if reply[j + 1] == 1 and tonumber(ARGV[6 * i + 1]) > 0 then
      local q = 5 * i - 5
      local _, rem, reset = step(KEYS[i], params[q + 1], params[q + 2], params[q + 3], params[q + 4], params[q + 5], 0)
      reply[j + 2], reply[j + 3], reply[j + 4], reply[j + 5], reply[j + 6] = rem, reset, 0, 0, NONE
    end
  end
end

if all then
  for i = 1, nkeys do
    local k = 5 * i - 5
    local px = pend[k + 5]
    if px > 0 then
      local algo, key = pend[k + 1], KEYS[i]
      if algo == 1 then
        fw_write(key, pend[k + 2], pend[k + 3], 0, px)
      elseif algo == 3 or algo == 6 then
        sw_write(key, pend[k + 2], pend[k + 3], pend[k + 4], px)
      elseif algo == 2 then
        sl_write(key, pend[k + 2], pend[k + 3], pend[k + 4], px, tonumber(ARGV[6 * i - 2]))
      elseif algo == 4 then
        tb_write(key, pend[k + 2], pend[k + 3], 0, px)
      else
        gc_write(key, pend[k + 2], 0, 0, px)
      end
    end
  end
end
return reply
