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
-- algorithm's step, returning the step's ten values and, for the buckets,
-- the bookkeeping to write after an admitted request (see bucket_refund in
-- release.lua): H the latest decision time, A the time the backlog was last
-- found empty (0: not known since the bookkeeping started), R the µs
-- returned by releases. A state without bookkeeping gets it only when keep
-- is set (a reservation); it is nil otherwise. It returns nil when the key
-- holds a value floodgate did not write. Arguments were checked by
-- layer_args. (The bookkeeping is written out twice rather than shared in
-- a function: every function defined at the top level costs every call.)
local function step(key, algo, limit, w, burst, md, cost, now, keep)
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
    local t, n, h, a, r = tb_read(key)
    if t then
      local ok, rem, reset, retry, delay, reason, s1, s2, s3, ttl, at, full = tb_step(t, n, now, idiv(w, limit), burst, cost)
      if not h and keep then
        h, a, r = at, 0, 0
      end
      if h then
        if at > h then
          h = at
        end
        if full then
          a = at
        end
      end
      return ok, rem, reset, retry, delay, reason, s1, s2, s3, ttl, h, a, r
    end
  else
    local t, h, a, r = gc_read(key)
    if t then
      local ok, rem, reset, retry, delay, reason, s1, s2, s3, ttl, at, full = gc_step(t, now, idiv(w, limit), burst, md, cost)
      if not h and keep then
        h, a, r = at, 0, 0
      end
      if h then
        if at > h then
          h = at
        end
        if full then
          a = at
        end
      end
      return ok, rem, reset, retry, delay, reason, s1, s2, s3, ttl, h, a, r
    end
  end
  return nil
end
