-- gcra.lua: floodgate.GCRA (leaky bucket as a meter), a mirror of stepGCRA.
--
-- State: the string "T" (theoretical arrival time µs), written with SET PX;
-- "T H A R" once the key has taken part in a split decision, with the same
-- bookkeeping as token_bucket.lua (H latest decision time, A last time the
-- bucket was found with no backlog, R µs returned by releases).

-- gc_read returns T and, for the long form, H, A, R (0 when absent), or nil
-- if the value is not a GCRA state.
local function gc_read(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil -- a key of another type (WRONGTYPE): not floodgate's, fails its decision only
  end
  if not v then
    return 0
  end
  local t = smatch(v, '^(%d+)$')
  if t then
    return tonumber(t)
  end
  local h, a, r
  t, h, a, r = smatch(v, '^(%d+) (%d+) (%d+) (%d+)$')
  if not t then
    return nil
  end
  return tonumber(t), tonumber(h), tonumber(a), tonumber(r)
end

-- gc_step takes the interval iv, the effective burst b and the shaping
-- allowance md (max delay µs). After the usual ten values it returns the
-- time it decided at and whether the backlog was empty (TAT not after now).
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
  return allowed, remaining, tat, retry, delay, reason, tat, 0, 0, tat - now, now, now >= t
end

-- gc_write stores the short form, or the long one when h is set.
local function gc_write(key, t, px, h, a, r)
  if h then
    redis.call('SET', key, sfmt('%d %d %d %d', t, h, a, r), 'PX', int(px))
  else
    redis.call('SET', key, int(t), 'PX', int(px))
  end
end
