-- gcra.lua: floodgate.GCRA (leaky bucket as a meter), a mirror of stepGCRA.
-- State: the string "T" (theoretical arrival time µs), written with SET PX.

local function gc_read(key)
  local v = redis.call('GET', key)
  if not v then
    return 0
  end
  local t = smatch(v, '^(%d+)$')
  if not t then
    return nil
  end
  return tonumber(t)
end

-- gc_step takes the interval iv, the effective burst b and the shaping
-- allowance md (max delay µs).
local function gc_step(t, now, iv, b, md, cost)
  local tol = b * iv
  local tat = t
  if now > tat then
    tat = now
  end
  local allowed, reason, retry, delay = false, NONE, 0, 0
  if cost > idiv(tol + md, iv) then
    reason = EXCEEDS
  elseif cost == 0 then
    allowed = tat + iv - now <= tol + md
    if not allowed then
      reason = LIMITED
      retry = tat + iv - now - tol - md
    end
  else
    local new = tat + cost * iv
    if new - now <= tol + md then
      allowed = true
      delay = new - now - tol
      if delay < 0 then
        delay = 0
      end
      tat = new
    else
      reason = LIMITED
      retry = new - now - tol - md
    end
  end
  local remaining = idiv(tol - (tat - now), iv)
  if remaining < 0 then
    remaining = 0
  end
  return allowed, remaining, tat, retry, delay, reason, tat, 0, 0, tat - now
end

local function gc_write(key, t, _n, _p, px)
  redis.call('SET', key, int(t), 'PX', int(px))
end
