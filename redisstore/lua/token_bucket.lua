-- token_bucket.lua: floodgate.TokenBucket, a mirror of stepTokenBucket.
-- State: the string "T N" (last refill time µs, tokens), written with SET PX.

local function tb_read(key)
  local v = redis.call('GET', key)
  if not v then
    return 0, 0
  end
  local t, n = smatch(v, '^(%d+) (%d+)$')
  if not t then
    return nil
  end
  return tonumber(t), tonumber(n)
end

-- tb_step takes the interval iv (µs per token) and the effective burst b.
local function tb_step(t, n, now, iv, b, cost)
  local tokens, last = b, now
  if t ~= 0 then
    tokens, last = n, t
    if now < last then
      now = last
    end
    local add = idiv(now - last, iv)
    tokens = tokens + add
    last = last + add * iv
    if tokens >= b then
      tokens, last = b, now
    end
  end
  local allowed, reason = admit(tokens, cost, b)
  if allowed and cost > 0 then
    tokens = tokens - cost
  end
  local reset = last + (b - tokens) * iv
  local retry = 0
  if reason == LIMITED then
    local need = cost
    if need < 1 then
      need = 1
    end
    retry = last + (need - tokens) * iv - now
  end
  return allowed, tokens, reset, retry, 0, reason, last, tokens, 0, reset - now
end

local function tb_write(key, t, n, _, px)
  redis.call('SET', key, sfmt('%d %d', t, n), 'PX', int(px))
end
