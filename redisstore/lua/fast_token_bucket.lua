-- fast_token_bucket.lua: one-layer token bucket decisions, the same as a
-- one-layer call of the general script (decide.lua with token_bucket.lua)
-- on the same state, written out flat (see fast_head.lua, which describes
-- the call and the reply). State: "T N", or "T N H A R" once a reservation
-- added the release's bookkeeping, which is then kept up to date as step in
-- layer.lua does (see token_bucket.lua); written with SET PX only when a
-- request is admitted.

    local now, limit, w, b, cost =
      tonumber(ARGV[nw]),
      (shared and P[3] or tonumber(ARGV[ai + 3])),
      (shared and P[4] or tonumber(ARGV[ai + 4])),
      (shared and P[5] or ARGV[ai + 5] == '0' and 0 or tonumber(ARGV[ai + 5])),
      (ARGV[cs] == '1' and 1 or tonumber(ARGV[cs])) -- most requests cost 1: skip strtod
    if (shared and P[2] or ARGV[ai + 2]) ~= '4' or not (now and limit and w and b and cost) or
      now % 1 ~= 0 or limit % 1 ~= 0 or w % 1 ~= 0 or b % 1 ~= 0 or cost % 1 ~= 0 or
      now < 0 or now > MAX_NOW or limit < 1 or limit > MAX_LIMIT or
      w < MIN_WINDOW or w > MAX_WINDOW or b < 0 or b > MAX_LIMIT or cost < 0 or cost > MAX_LIMIT then
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

    local t, n, h, ha, hr = 0, 0
    if type(v) == 'table' then
      code, msg = -1, v.err
      break
    end
    if v then
      local x, y = smatch(v, '^(%d+) (%d+)$')
      if not x then
        local c, d, e
        x, y, c, d, e = smatch(v, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
        if not x then
          code, msg = -1, 'ERR floodgate: key ' .. key .. ' holds a value floodgate did not write'
          break
        end
        h, ha, hr = tonumber(c), tonumber(d), tonumber(e)
      end
      t, n = tonumber(x), tonumber(y)
    end

    -- tb_step
    local tokens, last, full = b, now, true
    if t ~= 0 then
      tokens, last = n, t
      if now < last then
        now = last
      end
      local d = now - last
      local add = (d - fmod(d, iv)) / iv
      tokens = tokens + add
      last = last + add * iv
      full = tokens >= b
      if full then
        tokens, last = b, now
      end
    end
    -- admit (common.lua)
    local ok, reason = false, 1
    if cost > b then
      reason = 2
    elseif (cost == 0 and tokens >= 1) or (cost > 0 and cost <= tokens) then
      ok, reason = true, 0
    end
    if ok and cost > 0 then
      tokens = tokens - cost
    end
    local reset = last + (b - tokens) * iv
    local retry = 0
    if reason == 1 then
      local need = cost
      if need < 1 then
        need = 1
      end
      retry = last + (need - tokens) * iv - now
    end
    if ok and cost > 0 then
      local ttl = reset - now
      if ttl < MIN_TTL then
        ttl = MIN_TTL
      end
      ttl = ttl + TTL_SLACK + 999
      px = (ttl - fmod(ttl, 1000)) / 1000 -- val and px are written by the tail
      if h then
        if now > h then
          h = now
        end
        if full then
          ha = now
        end
        val = sfmt('%d %d %d %d %d', last, tokens, h, ha, hr)
      else
        val = sfmt('%d %d', last, tokens)
      end
    end
    reply[ri + 1], reply[ri + 2], reply[ri + 3], reply[ri + 4] = reason, tokens, reset, retry
