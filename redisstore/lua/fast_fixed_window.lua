-- fast_fixed_window.lua: a one-layer fixed window decision, the same as a
-- one-layer call of the general script (decide.lua with fixed_window.lua)
-- on the same state, but written out flat: Redis runs a script's whole body
-- on every call, and every function a script defines is created again each
-- time, so the single-layer scripts define none.
--
-- KEYS[1] is the key; ARGV is now (Unix µs), then the layer's six
-- arguments as in layer_args (algorithm 1, limit, window µs, burst, max
-- delay µs, cost; burst and max delay are not used). The Go side validated
-- them; the checks here only keep the script from running on garbage.
-- Reply: the six integers of decide.lua. State: "T N" (see
-- fixed_window.lua), written with SET PX only when a request is admitted.

local MAX_NOW = 4503599627370496
local MAX_LIMIT = 1099511627776
local MIN_WINDOW, MAX_WINDOW = 1000, 34560000000000
local MIN_TTL = 1000
local TTL_SLACK = 1000000
local fmod, sfmt = math.fmod, string.format

local now, limit, w, cost = tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[7])
if #KEYS ~= 1 or #ARGV ~= 7 or ARGV[2] ~= '1' or not (now and limit and w and cost) or
  now % 1 ~= 0 or limit % 1 ~= 0 or w % 1 ~= 0 or cost % 1 ~= 0 or
  now < 0 or now > MAX_NOW or limit < 1 or limit > MAX_LIMIT or
  w < MIN_WINDOW or w > MAX_WINDOW or cost < 0 or cost > MAX_LIMIT then
  return redis.error_reply('ERR floodgate: bad arguments for layer 1')
end

local key = KEYS[1]
local t, n = 0, 0
local v = redis.call('GET', key)
if v then
  local a, b = string.match(v, '^(%d+) (%d+)$')
  if not a then
    return redis.error_reply('ERR floodgate: key ' .. key .. ' holds a value floodgate did not write')
  end
  t, n = tonumber(a), tonumber(b)
end

if t ~= 0 and now < t then
  now = t
end
local start = now - fmod(now, w)
if t ~= start then
  n = 0
end
-- admit (common.lua)
local ok, reason = false, 1
if cost > limit then
  reason = 2
elseif (cost == 0 and limit - n >= 1) or (cost > 0 and cost <= limit - n) then
  ok, reason = true, 0
end
local retry = 0
if reason == 1 then
  retry = start + w - now
end
if ok and cost > 0 then
  n = n + cost
  local ttl = start + w - now
  if ttl < MIN_TTL then
    ttl = MIN_TTL
  end
  ttl = ttl + TTL_SLACK + 999
  redis.call('SET', key, sfmt('%d %d', start, n), 'PX', sfmt('%d', (ttl - fmod(ttl, 1000)) / 1000))
end
return {ok and 1 or 0, limit - n, start + w, retry, 0, reason}
