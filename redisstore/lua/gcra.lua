-- gcra.lua: floodgate.GCRA (the leaky bucket as a meter), the Lua of
-- algo's stepGCRA.
--
-- State: "T L" (theoretical arrival time µs, and the time the latest
-- admitted request was decided at), in text or in binary (the layout gc,
-- "T L E"); "T H A R" (in binary the layout gcr, "T H A R E")
-- once the key has taken part in a split decision, with the same
-- bookkeeping as token_bucket.lua (H latest decision time, which serves as
-- L, A last time the bucket was found with no backlog, R µs returned by
-- releases). A request whose now is before L (its instance's clock is
-- behind) is decided at L, as the other algorithms decide at their state's
-- time; a plain "T", written before L was kept, is read with no L. E,
-- binary only, is where the key's TTL ends: a write keeps the TTL when
-- its state needs no longer, and otherwise writes it with SET PX, longer
-- than needed (see ttlEnd in redisstore/assemble.go: once its TAT is past,
-- a state decides as no key does). The binary layouts without E, which
-- older builds wrote (gc0, gcr0), are read too.
--
-- This file is the algorithm's only Lua, cut into blocks at its "--@"
-- lines and assembled into every script (see fixed_window.lua and
-- redisstore/assemble.go).

--@ args now limit w b md cost
    if @OTHER ALGORITHM@ or not (now and limit and w and b and md and cost) or
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

--@ read t, h, ha, hr, l, te
    local t, h, ha, hr, l, te = 0 -- te: where the key's TTL ends (nil: not recorded)
    if v then
      if @IS gc@ then
        t, l, te = @UNPACK gc@
      elseif @IS gcr@ then
        t, h, ha, hr, te = @UNPACK gcr@
        l = h
      elseif @IS gc0@ then
        t, l = @UNPACK gc0@
      elseif @IS gcr0@ then
        t, h, ha, hr = @UNPACK gcr0@
        l = h
      else
        local x, c, d, e = smatch(v, '^(%d+) (%d+)$')
        if x then
          l = tonumber(c)
        else
          x = smatch(v, '^(%d+)$')
          if not x then
            x, c, d, e = smatch(v, '^(%d+) (%d+) (%d+) (%d+)$')
            if not x then
              @BAD@
            end
            h, ha, hr = tonumber(c), tonumber(d), tonumber(e)
            l = h
          end
        end
        t = tonumber(x)
      end
    end

--@ step
    if l and now < l then
      now = l -- a clock behind the latest admitted request: decided at its time
    end
    local tol = b * iv -- how far the TAT may run ahead of now
    local tat = t
    if now > tat then
      tat = now
    end
    local most = tol + md -- with the shaping allowance
    if cost > (most - fmod(most, iv)) / iv then
      reason = 2
    elseif cost == 0 then -- a peek: what a cost of 1 would get now
      ok = tat + iv - now <= most
      if ok then
        reason = 0
        delay = tat + iv - now - tol
        if delay < 0 then
          delay = 0
        end
      else
        retry = tat + iv - now - most
      end
    else
      local new = tat + cost * iv
      if new - now <= most then
        ok, reason = true, 0
        delay = new - now - tol
        if delay < 0 then
          delay = 0
        end
        tat = new
      else
        retry = new - now - most
      end
    end
    local x = tol - (tat - now)
    rem = (x - fmod(x, iv)) / iv
    if rem < 0 then
      rem = 0
    end
    reset = tat
    if ok and cost > 0 then
      ttl = tat - now
@TTL END@
      if not h and @RESERVING@ then -- a reservation starts the bookkeeping
        h, ha, hr = now, 0, 0
      end
      if h then
        if now > h then
          h = now
        end
        if now >= t then
          ha = now
        end
        val = @PACK gcr@(tat, h, ha, hr, te)
      else
        val = @PACK gc@(tat, now, te)
      end
    end

--@ reserved
    u1, u2, u3 = tat, ha, hr

--@ release
    -- Moves the TAT back by what a reservation of cost (span = cost ×
    -- interval µs) still holds, as far as that is safe (bucket_refund),
    -- and returns the µs given back. The reservation left the TAT at u1,
    -- with bookkeeping A = u2 and R = u3.
    local v = redis.call('GET', key)
    if not v then
      return 0
    end
    local t, h, ca, cr, te
    if @IS gcr@ then
      t, h, ca, cr, te = @UNPACK gcr@
    elseif @IS gcr0@ then
      t, h, ca, cr = @UNPACK gcr0@
    else
      t, h, ca, cr = smatch(v, '^(%d+) (%d+) (%d+) (%d+)$')
      if not t then
        return 0 -- the short form: no bookkeeping, so nothing is known to be safe
      end
      t, h, ca, cr = tonumber(t), tonumber(h), tonumber(ca), tonumber(cr)
    end
    local back = bucket_refund(t, h, ca, cr, cost * iv, u1, u2, u3, cost * iv, key)
    if back <= 0 then
      return 0
    end
    redis.call('SET', key, @PACK gcr@(t - back, h, ca, cr + back, te or 0), 'KEEPTTL') -- 0: the TTL's end is not known
    return back
