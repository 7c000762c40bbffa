-- fast_sliding_window.lua: one-layer sliding window decisions, the same as
-- a one-layer call of the general script (decide.lua with
-- sliding_window.lua) on the same state, written out flat (see
-- fast_head.lua, which describes the call and the reply). State: "T N P"
-- (see sliding_window.lua), written with SET PX only when a request is
-- admitted.

    local now, limit, w, cost =
      tonumber(ARGV[nw]),
      (shared and P[3] or tonumber(ARGV[ai + 3])),
      (shared and P[4] or tonumber(ARGV[ai + 4])),
      (ARGV[cs] == '1' and 1 or tonumber(ARGV[cs])) -- most requests cost 1: skip strtod
    if (shared and P[2] or ARGV[ai + 2]) ~= '3' or not (now and limit and w and cost) or
      now % 1 ~= 0 or limit % 1 ~= 0 or w % 1 ~= 0 or cost % 1 ~= 0 or
      now < 0 or now > MAX_NOW or limit < 1 or limit > MAX_LIMIT or
      w < MIN_WINDOW or w > MAX_WINDOW or cost < 0 or cost > MAX_LIMIT then
      code, msg = -2, 'ERR floodgate: bad arguments for layer 1'
      break
    end

    local t, n0, p0 = 0, 0, 0
    if type(v) == 'table' then
      code, msg = -1, v.err
      break
    end
    if v then
      local a, b, c = string.match(v, '^(%d+) (%d+) (%d+)$')
      if not a then
        code, msg = -1, 'ERR floodgate: key ' .. key .. ' holds a value floodgate did not write'
        break
      end
      t, n0, p0 = tonumber(a), tonumber(b), tonumber(c)
    end

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
    -- est: sw_weighted(prev, rem, w) + cur
    local rem = w - (now - start)
    local est = cur
    if prev ~= 0 and rem > 0 then
      est = est + floor(prev * rem / w)
    end
    -- admit (common.lua)
    local ok, reason = false, 1
    if cost > limit then
      reason = 2
    elseif (cost == 0 and limit - est >= 1) or (cost > 0 and cost <= limit - est) then
      ok, reason = true, 0
    end
    if ok and cost > 0 then
      cur = cur + cost
      est = est + cost
    end
    local reset = start + w
    if cur > 0 then
      reset = start + 2 * w
    end
    local retry = 0
    if reason == 1 then
      local need = cost
      if need < 1 then
        need = 1
      end
      -- sw_span(allowance, w, count), subtracted from the end of a window
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
      local ttl = start + 2 * w - now
      if ttl < MIN_TTL then
        ttl = MIN_TTL
      end
      ttl = ttl + TTL_SLACK + 999
      val, px = sfmt('%d %d %d', start, cur, prev), (ttl - fmod(ttl, 1000)) / 1000 -- written by the tail
    end
    reply[ri + 1], reply[ri + 2], reply[ri + 3], reply[ri + 4] = reason, limit - est, reset, retry
