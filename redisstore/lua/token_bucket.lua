-- token_bucket.lua: floodgate.TokenBucket, a mirror of stepTokenBucket.
--
-- State: the string "T N" (last refill time µs, tokens), written with SET PX.
-- Once the key has taken part in a split decision (a reserve, see
-- decide.lua) it is "T N H A R" until it expires, the three extra numbers
-- being the bookkeeping a release needs (H the latest time any admitted
-- request was decided at, A the time the bucket was last found full, R the
-- µs of reservations returned so far; see bucket_refund in release.lua);
-- decisions never read them.

-- tb_read returns T, N and, for the long form, H, A, R (0, 0 when absent),
-- or nil if the value is not a token bucket state.
local function tb_read(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil -- a key of another type (WRONGTYPE): not floodgate's, fails its decision only
  end
  if not v then
    return 0, 0
  end
  local t, n = smatch(v, '^(%d+) (%d+)$')
  if t then
    return tonumber(t), tonumber(n)
  end
  local h, a, r
  t, n, h, a, r = smatch(v, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
  if not t then
    return nil
  end
  return tonumber(t), tonumber(n), tonumber(h), tonumber(a), tonumber(r)
end

-- tb_step takes the interval iv (µs per token) and the effective burst b.
-- After the usual ten values it returns the time it decided at and whether
-- it found the bucket full (for the bookkeeping).
local function tb_step(t, n, now, iv, b, cost)
  local tokens, last, full = b, now, true
  if t ~= 0 then
    tokens, last = n, t
    if now < last then
      now = last
    end
    local add = idiv(now - last, iv)
    tokens = tokens + add
    last = last + add * iv
    full = tokens >= b
    if full then
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
  return allowed, tokens, reset, retry, 0, reason, last, tokens, 0, reset - now, now, full
end

-- tb_write stores the short form, or the long one when h is set.
local function tb_write(key, t, n, px, h, a, r)
  if h then
    redis.call('SET', key, sfmt('%d %d %d %d %d', t, n, h, a, r), 'PX', int(px))
  else
    redis.call('SET', key, sfmt('%d %d', t, n), 'PX', int(px))
  end
end
