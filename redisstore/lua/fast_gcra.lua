-- fast_gcra.lua: one-layer GCRA decisions, the same as a one-layer call of
-- the general script (decide.lua with gcra.lua) on the same state, written
-- out flat (see fast_head.lua, which describes the call and the reply).
-- State: "T", or "T H A R" once a reservation added the release's
-- bookkeeping, which is then kept up to date as step in layer.lua does (see
-- gcra.lua); written with SET PX only when a request is admitted.

    local now, limit, w, b, md, cost =
      tonumber(ARGV[nw]),
      (shared and P[3] or tonumber(ARGV[ai + 3])),
      (shared and P[4] or tonumber(ARGV[ai + 4])),
      (shared and P[5] or ARGV[ai + 5] == '0' and 0 or tonumber(ARGV[ai + 5])),
      (shared and P[6] or ARGV[ai + 6] == '0' and 0 or tonumber(ARGV[ai + 6])),
      (ARGV[cs] == '1' and 1 or tonumber(ARGV[cs])) -- most requests cost 1: skip strtod
    if (shared and P[2] or ARGV[ai + 2]) ~= '5' or not (now and limit and w and b and md and cost) or
      now % 1 ~= 0 or limit % 1 ~= 0 or w % 1 ~= 0 or b % 1 ~= 0 or md % 1 ~= 0 or cost % 1 ~= 0 or
      now < 0 or now > MAX_NOW or limit < 1 or limit > MAX_LIMIT or w < MIN_WINDOW or w > MAX_WINDOW or
      b < 0 or b > MAX_LIMIT or md < 0 or md > MAX_SPAN or cost < 0 or cost > MAX_LIMIT then
      code, msg = -2, 'ERR floodgate: bad arguments for layer 1'
      break
    end
    if b == 0 then
      b = limit
    end
    local iv = (w - fmod(w, limit)) / limit
    if iv < 1 or b * iv > MAX_SPAN then
      code, msg = -2, 'ERR floodgate: bad rate for layer 1'
      break
    end

    local t, h, ha, hr = 0
    if type(v) == 'table' then
      code, msg = -1, v.err
      break
    end
    if v then
      local x = smatch(v, '^(%d+)$')
      if not x then
        local c, d, e
        x, c, d, e = smatch(v, '^(%d+) (%d+) (%d+) (%d+)$')
        if not x then
          code, msg = -1, 'ERR floodgate: key ' .. key .. ' holds a value floodgate did not write'
          break
        end
        h, ha, hr = tonumber(c), tonumber(d), tonumber(e)
      end
      t = tonumber(x)
    end

    -- gc_step
    local tol = b * iv
    local tat = t
    if now > tat then
      tat = now
    end
    local ok, reason, retry, delay = false, 0, 0, 0
    local most = tol + md
    if cost > (most - fmod(most, iv)) / iv then
      reason = 2
    elseif cost == 0 then
      ok = tat + iv - now <= most
      if not ok then
        reason = 1
        retry = tat + iv - now - most
      end
    else
      local new = tat + cost * iv
      if new - now <= most then
        ok = true
        delay = new - now - tol
        if delay < 0 then
          delay = 0
        end
        tat = new
      else
        reason = 1
        retry = new - now - most
      end
    end
    local x = tol - (tat - now)
    local remaining = (x - fmod(x, iv)) / iv
    if remaining < 0 then
      remaining = 0
    end
    if ok and cost > 0 then
      local ttl = tat - now
      if ttl < MIN_TTL then
        ttl = MIN_TTL
      end
      ttl = ttl + TTL_SLACK + 999
      px = (ttl - fmod(ttl, 1000)) / 1000 -- val and px are written by the tail
      if h then
        if now > h then
          h = now
        end
        if now >= t then
          ha = now
        end
        val = sfmt('%d %d %d %d', tat, h, ha, hr)
      else
        val = sfmt('%d', tat)
      end
    end
    reply[ri + 1], reply[ri + 2], reply[ri + 3], reply[ri + 4] = reason, remaining, tat, ok and delay or retry
