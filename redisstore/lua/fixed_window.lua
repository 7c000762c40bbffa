-- fixed_window.lua: floodgate.FixedWindow, the Lua of algo's
-- stepFixedWindow. State: "T N" (window start µs, count in it), in text
-- or in binary (the layout fw, "T N W": binary also records the window's
-- length W; see the state layouts in redisstore/assemble.go, which says
-- how every block reads both). Written with SET PX, or SET KEEPTTL over a
-- binary state of the same window start and length, whose key's TTL
-- already ends where this write's would (the window's end plus the
-- slack). A text state does not say its window's length: after a
-- policy's window grew under the same name, a state of the old window can
-- start where the new one does, and keeping its shorter TTL would lose
-- counts, so over a text state the TTL is always written.
--
-- This file is the algorithm's only Lua. It is not run as it is: the Go
-- package cuts it at its "--@" lines into blocks and assembles them into
-- the single-layer script, the layered script and the general script
-- (redisstore/assemble.go, which also says what each block reads and
-- sets).

--@ args now limit w cost
    if @OTHER ALGORITHM@ or not (now and limit and w and cost) or
      now % 1 ~= 0 or limit % 1 ~= 0 or w % 1 ~= 0 or cost % 1 ~= 0 or
      now < 0 or now > MAX_NOW or limit < 1 or limit > MAX_LIMIT or
      w < MIN_WINDOW or w > MAX_WINDOW or cost < 0 or cost > MAX_LIMIT then
      code, msg = -2, 'ERR floodgate: bad arguments for layer 1'
      break
    end

--@ read t, n, tw
    local t, n, tw = 0, 0 -- tw: the window's length as stored (nil: not known)
    if v then
      if @IS fw@ then
        t, n, tw = @UNPACK fw@
      else
        local x, y = smatch(v, '^(%d+) (%d+)$')
        if not x then
          @BAD@
        end
        t, n = tonumber(x), tonumber(y)
      end
    end

--@ step
    if t ~= 0 and now < t then
      now = t
    end
    local start = now - fmod(now, w)
    if t ~= start then
      n = 0
    end
    if cost > limit then
      reason = 2
    elseif (cost == 0 and limit - n >= 1) or (cost > 0 and cost <= limit - n) then
      ok, reason = true, 0
    end
    if reason == 1 then
      retry = start + w - now
    end
    if ok and cost > 0 then
      n = n + cost
      ttl, val = start + w - now, @PACK fw@(start, n, w)
      keep = t == start and tw == w
    end
    rem, reset = limit - n, start + w

--@ reserved
    u1 = start -- the window a release gives the cost back to

--@ release
    -- Takes a reservation of cost made in the window starting at u1 back
    -- off the count, if the state is still in that window; once the
    -- window has ended the reservation has ended with it and nothing is
    -- done.
    local t, n, tw = fw_read(key)
    if not t or t ~= u1 or n < cost then
      return 0
    end
    redis.call('SET', key, @PACK fw@(t, n - cost, tw or 0), 'KEEPTTL') -- 0: the length is not known
    return cost
