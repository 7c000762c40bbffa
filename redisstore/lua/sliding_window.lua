-- sliding_window.lua: floodgate.SlidingWindow, a mirror of
-- stepSlidingWindow. State: the string "T N P" (current window start µs,
-- count in it, count in the previous window), written with SET PX.

local function sw_read(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil -- a key of another type (WRONGTYPE): not floodgate's, fails its decision only
  end
  if not v then
    return 0, 0, 0
  end
  local t, n, p = smatch(v, '^(%d+) (%d+) (%d+)$')
  if not t then
    return nil
  end
  return tonumber(t), tonumber(n), tonumber(p)
end

-- sw_weighted is floodgate's weighted: floor(count × rem / w) in the same
-- double operations as the Go code.
local function sw_weighted(count, rem, w)
  if count == 0 or rem <= 0 then
    return 0
  end
  return floor(count * rem / w)
end

-- sw_span is floodgate's weightedSpan: ceil((allowance+1) × w / count) − 1,
-- at most w.
local function sw_span(allowance, w, count)
  if count == 0 then
    return w
  end
  local c = ceil((allowance + 1) * w / count) - 1
  if c > w then
    return w
  end
  return c
end

local function sw_step(t, n0, p0, now, limit, w, cost)
  if t ~= 0 and now < t then
    now = t
  end
  local start = now - fmod(now, w)
  local cur, prev = 0, 0
  if t == start then
    cur, prev = n0, p0
  elseif t == start - w then
    prev = n0
  end
  local rem = w - (now - start)
  local est = sw_weighted(prev, rem, w) + cur
  local allowed, reason = admit(limit - est, cost, limit)
  if allowed and cost > 0 then
    cur = cur + cost
    est = est + cost
  end
  local reset = start + w
  if cur > 0 then
    reset = start + 2 * w
  end
  local retry = 0
  if reason == LIMITED then
    local need = cost
    if need < 1 then
      need = 1
    end
    if cur + need <= limit then
      retry = start + w - sw_span(limit - cur - need, w, prev) - now
    else
      retry = start + 2 * w - sw_span(limit - need, w, cur) - now
    end
    if retry < 1 then
      retry = 1
    end
  end
  return allowed, limit - est, reset, retry, 0, reason, start, cur, prev, start + 2 * w - now
end

local function sw_write(key, t, n, p, px)
  redis.call('SET', key, sfmt('%d %d %d', t, n, p), 'PX', int(px))
end
