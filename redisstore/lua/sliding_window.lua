-- sliding_window.lua: floodgate.SlidingWindow, the Lua of algo's
-- stepSlidingWindow. State: "T N P" (current window start µs, count in
-- it, count in the previous window), in text or in binary (the layout sw,
-- "T N P W", W the window's length), written with SET PX, or SET KEEPTTL
-- over a binary state of the same window start and length (see
-- fixed_window.lua).
--
-- This file is the algorithm's only Lua, cut into blocks at its "--@"
-- lines and assembled into every script (see fixed_window.lua and
-- redisstore/assemble.go).

--@ args now limit w cost
    if @OTHER ALGORITHM@ or not (now and limit and w and cost) or
      now % 1 ~= 0 or limit % 1 ~= 0 or w % 1 ~= 0 or cost % 1 ~= 0 or
      now < 0 or now > MAX_NOW or limit < 1 or limit > MAX_LIMIT or
      w < MIN_WINDOW or w > MAX_WINDOW or cost < 0 or cost > MAX_LIMIT then
      code, msg = -2, 'ERR floodgate: bad arguments for layer 1'
      break
    end

--@ read t, n, p, tw
    local t, n, p, tw = 0, 0, 0 -- tw: the window's length as stored (nil: not known)
    if v then
      if @IS sw@ then
        t, n, p, tw = @UNPACK sw@
      else
        local x, y, z = smatch(v, '^(%d+) (%d+) (%d+)$')
        if not x then
          @BAD@
        end
        t, n, p = tonumber(x), tonumber(y), tonumber(z)
      end
    end

--@ step
    if t ~= 0 and now < t then
      now = t
    end
    local start = now - fmod(now, w)
    local cur, prev = 0, 0
    if t == start then
      cur, prev = n, p
    elseif t == start - w then
      prev = n
    end
    -- The estimate: the current count, plus the previous window's weighted
    -- by how much of it the sliding window still overlaps, floor(prev ×
    -- over / w) in the same double operations as Go's weighted.
    local over = w - (now - start)
    local est = cur
    if prev ~= 0 and over > 0 then
      est = est + floor(prev * over / w)
    end
    if cost > limit then
      reason = 2
    elseif (cost == 0 and limit - est >= 1) or (cost > 0 and cost <= limit - est) then
      ok, reason = true, 0
    end
    if ok and cost > 0 then
      cur = cur + cost
      est = est + cost
    end
    reset = start + w
    if cur > 0 then
      reset = start + 2 * w
    end
    if reason == 1 then
      local need = cost
      if need < 1 then
        need = 1
      end
      -- Go's weightedSpan(allowance, w, count): the largest overlap that
      -- keeps the estimate within the allowance, subtracted from the end
      -- of a window.
      local allowance, count, stop = limit - need, cur, start + 2 * w
      if cur + need <= limit then
        allowance, count, stop = limit - cur - need, prev, start + w
      end
      local span = w
      if count ~= 0 then
        span = ceil((allowance + 1) * w / count) - 1
        if span > w then
          span = w
        end
      end
      retry = stop - span - now
      if retry < 1 then
        retry = 1
      end
    end
    if ok and cost > 0 then
      ttl, val = start + 2 * w - now, @PACK sw@(start, cur, prev, w)
      keep = t == start and tw == w
    end
    rem = limit - est

--@ reserved
    u1 = start

--@ release
    -- Takes a reservation of cost made in the window starting at u1 back:
    -- off the current count if the state is still in that window, off the
    -- previous window's count if the state has moved on by one window (the
    -- reservation still weighs on the estimate there), and not at all
    -- later.
    local t, n, p, tw = sw_read(key)
    if not t then
      return 0
    end
    if t == u1 and n >= cost then
      n = n - cost
    elseif t == u1 + w and p >= cost then
      p = p - cost
    else
      return 0
    end
    redis.call('SET', key, @PACK sw@(t, n, p, tw or 0), 'KEEPTTL') -- 0: the length is not known
    return cost
