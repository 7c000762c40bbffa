-- token_bucket.lua: floodgate.TokenBucket, the Lua of algo's
-- stepTokenBucket.
--
-- State: "T N" (last refill time µs, tokens), in text or in binary (the
-- layout tb, "T N E"). Once the key has taken part in a split decision (a
-- reserve, see decide.lua) it is "T N H A R" (in binary the layout tbr,
-- "T N H A R E") until it expires, the three extra numbers
-- being the bookkeeping a release needs (H the latest time any admitted
-- request was decided at, A the time the bucket was last found full, R the
-- µs of reservations returned so far; see bucket_refund in release.lua);
-- decisions never read them, and keep them up to date. E, binary only, is
-- where the key's TTL ends: a write keeps the TTL when its state needs no
-- longer, and otherwise writes it with SET PX, longer than needed (see
-- ttlEnd in redisstore/assemble.go: a full bucket decides as no key
-- does). The binary layouts without E, which older builds wrote (tb0,
-- tbr0), are read too.
--
-- This file is the algorithm's only Lua, cut into blocks at its "--@"
-- lines and assembled into every script (see fixed_window.lua and
-- redisstore/assemble.go).

--@ args now limit w b cost
    if @OTHER ALGORITHM@ or not (now and limit and w and b and cost) or
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

--@ read t, n, h, ha, hr, te
    local t, n, h, ha, hr, te = 0, 0 -- te: where the key's TTL ends (nil: not recorded)
    if v then
      if @IS tb@ then
        t, n, te = @UNPACK tb@
      elseif @IS tbr@ then
        t, n, h, ha, hr, te = @UNPACK tbr@
      elseif @IS tb0@ then
        t, n = @UNPACK tb0@
      elseif @IS tbr0@ then
        t, n, h, ha, hr = @UNPACK tbr0@
      else
        local x, y = smatch(v, '^(%d+) (%d+)$')
        if not x then
          local c, d, e
          x, y, c, d, e = smatch(v, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
          if not x then
            @BAD@
          end
          h, ha, hr = tonumber(c), tonumber(d), tonumber(e)
        end
        t, n = tonumber(x), tonumber(y)
      end
    end

--@ step
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
    if cost > b then
      reason = 2
    elseif (cost == 0 and tokens >= 1) or (cost > 0 and cost <= tokens) then
      ok, reason = true, 0
    end
    if ok and cost > 0 then
      tokens = tokens - cost
    end
    reset = last + (b - tokens) * iv
    if reason == 1 then
      local need = cost
      if need < 1 then
        need = 1
      end
      retry = last + (need - tokens) * iv - now
    end
    if ok and cost > 0 then
      ttl = reset - now
@TTL END@
      if not h and @RESERVING@ then -- a reservation starts the bookkeeping
        h, ha, hr = now, 0, 0
      end
      if h then
        if now > h then
          h = now
        end
        if full then
          ha = now
        end
        val = @PACK tbr@(last, tokens, h, ha, hr, te)
      else
        val = @PACK tb@(last, tokens, te)
      end
    end
    rem = tokens

--@ reserved
    u1, u2, u3 = reset, ha, hr -- F, the time the bucket is full again, and the bookkeeping

--@ release
    -- Returns to the bucket what a reservation of cost took, as far as
    -- that is safe, and returns the number of tokens given back. The
    -- reservation left the bucket full again at u1 (µs; the reset of its
    -- reply), with bookkeeping A = u2 and R = u3. The rule is
    -- bucket_refund's, to the microsecond: the bucket's full time
    -- T + (burst - N) x interval moves back by exactly what bucket_refund
    -- allows, as whole tokens added (rounded up) and the refill clock T
    -- moved on by the fraction of a token not given back (a refund a few
    -- microseconds short of the reservation gives back all its tokens and
    -- delays the next refill by those microseconds, where rounding down
    -- would keep a whole token). Capped at a full bucket.
    local v = redis.call('GET', key)
    if not v then
      return 0
    end
    local t, n, h, ca, cr, te
    if @IS tbr@ then
      t, n, h, ca, cr, te = @UNPACK tbr@
    elseif @IS tbr0@ then
      t, n, h, ca, cr = @UNPACK tbr0@
    else
      t, n, h, ca, cr = smatch(v, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
      if not t then
        return 0 -- the short form: no bookkeeping, so nothing is known to be safe
      end
      t, n, h, ca, cr = tonumber(t), tonumber(n), tonumber(h), tonumber(ca), tonumber(cr)
    end
    local back = bucket_refund(t + (b - n) * iv, h, ca, cr, cost * iv, u1, u2, u3, (b - n) * iv, key)
    if back <= 0 then
      return 0
    end
    local k = idiv(back + iv - 1, iv)
    redis.call('SET', key, @PACK tbr@(t + k * iv - back, n + k, h, ca, cr + back, te or 0), 'KEEPTTL') -- 0: the TTL's end is not known
    return k
