-- fast_quota.lua: one-layer quota decisions, the same as a one-layer call
-- of the general script (decide.lua with quota.lua) on the same state,
-- written out flat (see fast_head.lua, which describes the call and the
-- reply). The window and burst arguments carry the calendar period's start
-- and end (Unix µs). State: "T N E" (see quota.lua), written with SET PX
-- only when a request is admitted.

    local now, limit, start, stop, cost =
      tonumber(ARGV[nw]),
      (shared and P[3] or tonumber(ARGV[ai + 3])),
      (shared and P[4] or tonumber(ARGV[ai + 4])),
      (shared and P[5] or tonumber(ARGV[ai + 5])),
      (ARGV[cs] == '1' and 1 or tonumber(ARGV[cs])) -- most requests cost 1: skip strtod
    if (shared and P[2] or ARGV[ai + 2]) ~= '6' or not (now and limit and start and stop and cost) or
      now % 1 ~= 0 or limit % 1 ~= 0 or start % 1 ~= 0 or stop % 1 ~= 0 or cost % 1 ~= 0 or
      now < 0 or now > MAX_NOW or limit < 1 or limit > MAX_LIMIT or cost < 0 or cost > MAX_LIMIT or
      start < 0 or start > now or now >= stop or stop > MAX_NOW then
      code, msg = -2, 'ERR floodgate: bad arguments for layer 1'
      break
    end

    local t, n, e = 0, 0
    if type(v) == 'table' then
      code, msg = -1, v.err
      break
    end
    if v then
      local a, b
      a, b, e = string.match(v, '^(%d+) (%d+) (%d+)$')
      if not a then
        code, msg = -1, 'ERR floodgate: key ' .. key .. ' holds a value floodgate did not write'
        break
      end
      t, n = tonumber(a), tonumber(b)
    end

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
      retry = stop - now
    end
    if ok and cost > 0 then
      n = n + cost
      local ttl = stop - now + QUOTA_GRACE
      if ttl < MIN_TTL then
        ttl = MIN_TTL
      end
      ttl = ttl + TTL_SLACK + 999
      val, px = sfmt('%d %d %d', start, n, stop), (ttl - fmod(ttl, 1000)) / 1000 -- written by the tail
      if e and t == start and tonumber(e) == stop then
        px = -1 -- the key's TTL already ends where this one would (see fast_head.lua)
      end
    end
    reply[ri + 1], reply[ri + 2], reply[ri + 3], reply[ri + 4] = reason, limit - n, stop, retry
