-- common.lua: helpers shared by every algorithm. The Go package
-- concatenates common.lua, the algorithm files and decide.lua into one
-- script, so the locals defined here are visible to everything after.
--
-- All quantities are integers (Unix µs, µs, cost units) below 2^53, so Lua's
-- doubles hold them exactly. Nothing here calls TIME: now comes from ARGV.

local fmod, floor, ceil = math.fmod, math.floor, math.ceil
local sfmt, smatch = string.format, string.match

-- Reasons, as floodgate.Reason.
local NONE, LIMITED, EXCEEDS = 0, 1, 2

-- MIN_TTL is floodgate's shortest TTL in µs (one millisecond).
local MIN_TTL = 1000

-- TTL_SLACK is floodgate.TTLSlack in µs, added to every TTL (clock skew
-- between instances; a state past its life decides like a fresh one).
local TTL_SLACK = 1000000

-- idiv returns a / b truncated toward zero, exactly like Go's integer
-- division: fmod is exact, so a - fmod(a, b) is an exact multiple of b and
-- dividing it by b is exact too (plain floor(a / b) could round up when the
-- quotient is within half an ulp of an integer).
local function idiv(a, b)
  return (a - fmod(a, b)) / b
end

-- admit mirrors floodgate's admit: peeks ask whether one unit fits, costs
-- above capacity are refused outright, others fit or not.
local function admit(remaining, cost, capacity)
  if cost > capacity then
    return false, EXCEEDS
  end
  if (cost == 0 and remaining >= 1) or (cost > 0 and cost <= remaining) then
    return true, NONE
  end
  return false, LIMITED
end

-- int formats an integer-valued number without losing digits (tostring and
-- redis.call's own conversion may use 14 significant digits or exponents).
local function int(x)
  return sfmt('%d', x)
end

-- In batch mode (see batch in decide.lua) a key may be decided many times
-- in one call: a layer every caller shares, such as a global edge limit,
-- appears in every decision. cache then holds, for every key read or
-- written so far in the call, its value (false: no key), and the writes
-- are deferred: dirty lists the keys to write, px their PX in ms, and
-- flush writes each once, with its last value and TTL, at the end of the
-- call. A script runs atomically and Redis's clock stands still while it
-- runs, so this stores exactly what writing every decision's state at
-- once would, with one GET and one SET per key instead of one per
-- decision. Outside batch mode cache is nil and reads and writes go
-- straight to Redis.
local cache, dirty, px_of

-- get reads key's value through the cache: a string, false (no key) or an
-- error table (a key of another type; not cached, so every decision that
-- reads it fails alone).
local function get(key)
  if cache then
    local v = cache[key]
    if v == nil then
      v = redis.pcall('GET', key)
      if type(v) ~= 'table' then
        cache[key] = v
      end
    end
    return v
  end
  return redis.pcall('GET', key)
end

-- put stores v at key with a TTL of px ms, or defers it in batch mode.
local function put(key, v, px)
  if cache then
    if not px_of[key] then
      dirty[#dirty + 1] = key
    end
    cache[key], px_of[key] = v, px
    return
  end
  redis.call('SET', key, v, 'PX', int(px))
end

-- flush writes the deferred values, in the order the keys were first
-- written, and leaves batch mode.
local function flush()
  for i = 1, #dirty do
    local key = dirty[i]
    redis.call('SET', key, cache[key], 'PX', int(px_of[key]))
  end
  cache, dirty, px_of = nil, nil, nil
end
