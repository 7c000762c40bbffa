-- fixed_window.lua: floodgate.FixedWindow, a mirror of stepFixedWindow.
-- State: the string "T N" (window start µs, count in it), written with SET PX.

-- fw_read returns the stored T, N (0, 0 when absent), or nil if the value is
-- not a fixed window state.
local function fw_read(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil -- a key of another type (WRONGTYPE): not floodgate's, fails its decision only
  end
  if not v then
    return 0, 0
  end
  local t, n = smatch(v, '^(%d+) (%d+)$')
  if not t then
    return nil
  end
  return tonumber(t), tonumber(n)
end

-- fw_step returns allowed, remaining, resetAt, retry, delay, reason, the new
-- state (3 slots) and its TTL in µs.
local function fw_step(t, n0, now, limit, w, cost)
  if t ~= 0 and now < t then
    now = t
  end
  local start = now - fmod(now, w)
  local n = 0
  if t == start then
    n = n0
  end
  local allowed, reason = admit(limit - n, cost, limit)
  if allowed and cost > 0 then
    n = n + cost
  end
  local retry = 0
  if reason == LIMITED then
    retry = start + w - now
  end
  return allowed, limit - n, start + w, retry, 0, reason, start, n, 0, start + w - now
end

local function fw_write(key, t, n, _, px)
  redis.call('SET', key, sfmt('%d %d', t, n), 'PX', int(px))
end
