-- common.lua: helpers shared by every algorithm of the general script.
-- The Go package concatenates common.lua, the algorithms' functions
-- (assembled from lua/<algorithm>.lua, see redisstore/assemble.go),
-- sliding_log.lua, layer.lua, release.lua and decide.lua into one script,
-- so the locals defined here are visible to everything after.
--
-- All quantities are integers (Unix µs, µs, cost units) below 2^53, so Lua's
-- doubles hold them exactly. Nothing here calls TIME: now comes from ARGV.

local fmod, floor, ceil = math.fmod, math.floor, math.ceil
local sfmt, smatch = string.format, string.match
local sbyte, spack, sunpack = string.byte, struct.pack, struct.unpack -- the states' binary layouts (assemble.go)

-- Reasons, as floodgate.Reason.
local NONE, LIMITED, EXCEEDS = 0, 1, 2

-- MIN_TTL is floodgate's shortest TTL in µs (one millisecond).
local MIN_TTL = 1000

-- TTL_SLACK is floodgate.TTLSlack in µs, added to every TTL (clock skew
-- between instances; a state past its life decides like a fresh one).
local TTL_SLACK = 1000000

-- QUOTA_GRACE is algo.QuotaGrace in µs: how long a period's key outlives
-- the period.
local QUOTA_GRACE = 3600000000

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
