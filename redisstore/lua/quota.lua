-- quota.lua: floodgate.Quota, the Lua of algo's stepQuota. The calendar
-- period (start and end, Unix µs) is computed in Go, where the time zones
-- are, and passed in the window and burst arguments (w and b below); each
-- period has its own key, so a key's state is always its own period's.
-- State: "T N E" (period start, used, period end), in text or in binary
-- (the layout qt), written with SET PX, or SET KEEPTTL over a state of
-- the same period: its expiry
-- depends on the period alone, so the key already expires where the new
-- state would (see fast_head.lua).
--
-- This file is the algorithm's only Lua, cut into blocks at its "--@"
-- lines and assembled into every script (see fixed_window.lua and
-- redisstore/assemble.go).

--@ args now limit w b cost
    if @OTHER ALGORITHM@ or not (now and limit and w and b and cost) or
      now % 1 ~= 0 or limit % 1 ~= 0 or w % 1 ~= 0 or b % 1 ~= 0 or cost % 1 ~= 0 or
      now < 0 or now > MAX_NOW or limit < 1 or limit > MAX_LIMIT or cost < 0 or cost > MAX_LIMIT or
      w < 0 or w > now or now >= b or b > MAX_NOW then
      code, msg = -2, 'ERR floodgate: bad arguments for layer 1'
      break
    end

--@ read t, n, e
    local t, n, e = 0, 0 -- e: the period end as stored (a string in text), read only to keep a TTL
    if v then
      if @IS qt@ then
        t, n, e = @UNPACK qt@
      else
        local x, y
        x, y, e = smatch(v, '^(%d+) (%d+) (%d+)$')
        if not x then
          @BAD@
        end
        t, n = tonumber(x), tonumber(y)
      end
    end

--@ step
    local start, stop = w, b -- the period
    if not (e and t < stop and tonumber(e) > start) then
      -- not this period (nor this period's name in a former time zone,
      -- which overlaps it: see algo's stepQuota)
      n = 0
    end
    if cost > limit then
      reason = 2
    elseif (cost == 0 and limit - n >= 1) or (cost > 0 and cost <= limit - n) then
      ok, reason = true, 0
    end
    if reason == 1 then
      retry = stop - now
    end
    if ok and cost > 0 then
      n = n + cost
      ttl, val = stop - now + QUOTA_GRACE, @PACK qt@(start, n, stop)
      keep = e and t == start and tonumber(e) == stop
    end
    rem, reset = limit - n, stop

--@ reserved
    u1 = start

--@ release
    -- Takes a reservation of cost made in the period starting at u1 back
    -- off the period's usage, if the key still counts that period.
    local t, n, e = qt_read(key)
    if not t or t ~= u1 or n < cost then
      return 0
    end
    redis.call('SET', key, @PACK qt@(t, n - cost, e), 'KEEPTTL')
    return cost
