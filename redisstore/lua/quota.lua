-- quota.lua: floodgate.Quota, a mirror of stepQuota. The calendar period
-- (start and end, Unix µs) is computed in Go, where the time zones are, and
-- passed in ARGV; each period has its own key, so a key's state is always
-- its own period's. State: the string "T N E" (period start, used, period
-- end), written with SET PX, reusing sw_read / sw_write's encoding.

-- QUOTA_GRACE is floodgate.QuotaGrace in µs: how long a period's key
-- outlives the period.
local QUOTA_GRACE = 3600000000

local function qt_step(t, n0, now, start, stop, limit, cost)
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
    retry = stop - now
  end
  return allowed, limit - n, stop, retry, 0, reason, start, n, stop, stop - now + QUOTA_GRACE
end
