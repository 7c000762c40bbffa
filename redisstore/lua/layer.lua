-- layer.lua: what decide.lua and release.lua share: the bounds, the checks
-- of one layer's arguments, and one layer's step.

local MAX_LAYERS = 16
local MAX_NOW = 4503599627370496   -- 2^52 µs, the year 2112
local MAX_LIMIT = 1099511627776    -- 2^40, floodgate.MaxLimit and MaxCost
local MAX_SPAN = 1125899906842624  -- 2^50 µs, bound of burst × interval and max delay
local MIN_WINDOW, MAX_WINDOW = 1000, 34560000000000 -- 1ms .. 400 days
local MAX_LOG_LIMIT = 100000
local MAX_STATE = 9007199254740992 -- 2^53: any number a state or reservation holds

-- arg returns ARGV[i] as an integer in lo..hi, or nil.
local function arg(i, lo, hi)
  local x = tonumber(ARGV[i])
  if x == nil or x ~= floor(x) or x < lo or x > hi then
    return nil
  end
  return x
end

-- layer_args checks the six arguments of layer i, ARGV[a..a+5]: algorithm
-- (floodgate.Algorithm: 1 fixed window, 2 sliding log, 3 sliding window,
-- 4 token bucket, 5 gcra, 6 quota), limit, window µs, burst, max delay µs,
-- cost. For quota the window and burst slots carry the calendar period's
-- start and end (Unix µs), computed in Go. It returns them with the
-- effective burst of a bucket (burst 0 means limit), or nil and an error
-- reply.
local function layer_args(a, i, now)
  local algo = arg(a, 1, 6)
  local limit = arg(a + 1, 1, MAX_LIMIT)
  local w, burst
  if algo == 6 then
    w, burst = arg(a + 2, 0, MAX_NOW), arg(a + 3, 0, MAX_NOW)
  else
    w, burst = arg(a + 2, MIN_WINDOW, MAX_WINDOW), arg(a + 3, 0, MAX_LIMIT)
  end
  local md = arg(a + 4, 0, MAX_SPAN)
  local cost = arg(a + 5, 0, MAX_LIMIT)
  local bad
  if not (algo and limit and w and burst and md and cost) then
    bad = 'arguments'
  elseif algo == 6 and not (w <= now and now < burst) then
    bad = 'quota period'
  elseif algo == 2 and limit > MAX_LOG_LIMIT then
    bad = 'sliding log limit'
  elseif algo == 4 or algo == 5 then
    local iv = idiv(w, limit)
    if burst == 0 then
      burst = limit
    end
    if iv < 1 or burst * iv > MAX_SPAN then
      bad = 'rate'
    end
  end
  if bad then
    return nil, redis.error_reply(sfmt('ERR floodgate: bad %s for layer %d', bad, i))
  end
  return algo, limit, w, burst, md, cost
end

-- step decides one layer at now: it reads the key's state and runs the
-- algorithm's step, returning ok, rem, reset, retry, delay, reason, then
-- ttl (µs, before MIN_TTL and TTL_SLACK), val and keep (the new state, for
-- a SET, and whether the key's TTL already ends where ttl would), then
-- u1, u2, u3: what a release needs (the window or period start, the
-- bucket's full time and bookkeeping; see the reserved blocks) or, for the
-- sliding log, whose state is no string, the new entry's time, CUM and
-- COST for sl_write. reserving (a reservation) starts the buckets'
-- bookkeeping. It returns nil when the key holds a value floodgate did not
-- write. Arguments were checked by layer_args.
local function step(key, algo, limit, w, burst, md, cost, now, reserving)
  if algo == 1 then
    return fw_decide(key, now, limit, w, burst, md, 0, cost, reserving)
  elseif algo == 3 then
    return sw_decide(key, now, limit, w, burst, md, 0, cost, reserving)
  elseif algo == 6 then
    return qt_decide(key, now, limit, w, burst, md, 0, cost, reserving)
  elseif algo == 4 then
    return tb_decide(key, now, limit, w, burst, md, idiv(w, limit), cost, reserving)
  elseif algo == 5 then
    return gc_decide(key, now, limit, w, burst, md, idiv(w, limit), cost, reserving)
  end
  local ok, rem, reset, retry, delay, reason, s1, s2, s3, ttl = sl_step(key, now, limit, w, cost)
  if ok == nil then
    return nil
  end
  return ok, rem, reset, retry, delay, reason, ttl, nil, false, s1, s2, s3
end
