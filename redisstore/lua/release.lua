-- release.lua: the release of a reservation (see decide.lua), run when
-- another slot's part of a split decision denied it or failed.
--
-- KEYS[1..n] are the keys of the layers the reservation consumed, KEYS[n+1]
-- the release's marker (in the same slot). ARGV[1] is 'release', ARGV[2]
-- now (the decision's time), ARGV[3] the marker's TTL in ms; then nine
-- arguments per layer: the six of the decision (layer_args) and the three
-- numbers the reservation replied for it.
--
-- The marker makes the release idempotent: SET NX either creates it, and
-- the layers are given back, or finds it, and nothing is. Each algorithm's
-- release gives back only what it can prove is still held by this
-- reservation (a window that has ended, an entry that has expired, a
-- bucket backlog that has leaked are left alone), so a release never makes
-- a layer admit more than its limit; it does not look at the clock.
--
-- Reply: 1 if this call gave back (0 if the marker was there), then four
-- integers per layer: what was given back (cost units; µs of TAT for
-- gcra), 1 if the key holds a floodgate state (0 if it holds something
-- else), and the layer's standing after the release as a peek sees it
-- (remaining, resetAt µs).

local function release(n, now)
  -- The releases of the algorithms are defined here rather than in their
  -- files, so that they are created only when a release runs: Redis runs
  -- the whole script on every call, and every function defined at its top
  -- level costs every decision an allocation.

  -- bucket_refund is the release rule of both bucket algorithms. Seen
  -- through F, the time at which the bucket is full again (GCRA: the TAT;
  -- token bucket: T + (burst - N) x interval), they are one machine: a
  -- request at t of span s (cost x interval) sets F = max(F, t) + s, and
  -- what a request may take at t depends on F - t alone. A reservation
  -- appended the span [f - s, f] to the backlog that ends at F. Three
  -- things can eat into that span before the release comes, and the rule
  -- assumes the worst of each:
  --
  --   * time: whatever part of it lies before H, the latest time any
  --     admitted request was decided at, has leaked away as it would have
  --     anyway;
  --   * releases of reservations queued before it shift it earlier: by at
  --     most everything returned since (cr - r, R counting every release);
  --   * a request that found the backlog empty (F <= t, which moves A)
  --     means the whole span had leaked.
  --
  -- The span still ends at or after max(f - (cr - r), ca + s) (it was
  -- queued after the last emptying at A, and it is s long), so returning
  -- what of it lies after H never leaves the bucket fuller than if the
  -- reservation had never been made: nothing is over-admitted. When
  -- nothing touched the key since (F, A and R as the reservation left
  -- them) the whole span comes back, which is exact. fc, h, ca, cr are the
  -- key's current F, H, A, R; f, a, r what the reservation left. It
  -- returns µs, at most s, possibly <= 0.
  local function bucket_refund(fc, h, ca, cr, s, f, a, r)
    if ca ~= a then
      return 0
    end
    if fc == f and cr == r then
      return s
    end
    local low = f - (cr - r)
    if ca + s > low then
      low = ca + s
    end
    local back = low - h
    if back > s then
      back = s
    end
    return back
  end

  -- The releases of fixed window, sliding window, token bucket, GCRA and
  -- quota, from their files' release blocks (see redisstore/assemble.go).
  --@RELEASES@
  -- SL_RELEASE_CAP bounds the work of one sliding log release: the entries
  -- it may look through at the reservation's time, and the entries
  -- admitted after it that it may rename.
  local SL_RELEASE_CAP = 256

  -- sl_release takes back a reservation: one entry of the given cost at
  -- time at (any such entry: entries of equal time and cost are
  -- interchangeable, so it takes the latest). Dropping an entry from the
  -- middle of the set would leave its cost inside the running totals (CUM)
  -- of the entries after it, so those, admitted while the reservation was
  -- pending (none on a quiet key, a few on a busy one), are renamed with
  -- their CUM lowered by the cost; names keep their order and the live sum
  -- is exact again. If the entry is gone (expired and dropped) or more than
  -- SL_RELEASE_CAP entries follow it, nothing is done: the capacity comes
  -- back when the entry expires. It returns the cost given back.
  local function sl_release(key, cost, w, at, now)
    local same = redis.call('ZREVRANGEBYSCORE', key, int(at), int(at), 'LIMIT', '0', int(SL_RELEASE_CAP))
    local member
    for i = 1, #same do
      local _, k = sl_member(same[i])
      if k == cost then
        member = same[i]
        break
      end
    end
    if not member then
      return 0
    end
    local rank = redis.call('ZRANK', key, member)
    local after = redis.call('ZRANGE', key, int(rank + 1), int(rank + 1 + SL_RELEASE_CAP), 'WITHSCORES')
    if #after > 2 * SL_RELEASE_CAP then
      return 0
    end
    local old, new = {}, {}
    for i = 1, #after, 2 do
      local c, k = sl_member(after[i])
      if not c then
        return 0 -- a member floodgate did not write: leave the set alone
      end
      old[#old + 1] = after[i]
      new[#new + 1] = after[i + 1]
      new[#new + 1] = sfmt('%016d:%d', c - cost, k)
    end
    -- When the entry and those after it are the whole set, the ZREM
    -- empties it and Redis deletes the key, TTL and all; the ZADD would
    -- then recreate it without one. So the renamed entries are written
    -- back with the TTL the key had (time stands still inside a script,
    -- so PTTL then PEXPIRE restores the same instant). A key found
    -- without a TTL (which no floodgate script leaves) gets the longest a
    -- log needs: its newest entry's life plus the slack.
    if #new > 0 then
      local ttl = redis.call('PTTL', key)
      redis.call('ZREM', key, member, unpack(old))
      redis.call('ZADD', key, unpack(new))
      if ttl < 0 then
        local last = tonumber(after[#after])
        if last < at then
          last = at
        end
        ttl = idiv(last + w - now + TTL_SLACK + 999, 1000)
      end
      if ttl < 1 then
        ttl = 1
      end
      redis.call('PEXPIRE', key, int(ttl))
    else
      redis.call('ZREM', key, member)
    end
    return cost
  end

  local px = arg(3, 1, 86400000)
  if not px then
    return redis.error_reply('ERR floodgate: bad release marker TTL')
  end
  local ls = {}
  for i = 1, n do
    local a = 4 + 9 * (i - 1)
    local algo, limit, w, burst, md, cost = layer_args(a, i, now)
    if not algo then
      return limit
    end
    local u1, u2, u3 = arg(a + 6, 0, MAX_STATE), arg(a + 7, 0, MAX_STATE), arg(a + 8, 0, MAX_STATE)
    if not (u1 and u2 and u3) or cost == 0 then
      return redis.error_reply(sfmt('ERR floodgate: bad reservation for layer %d', i))
    end
    ls[i] = {algo, limit, w, burst, md, cost, u1, u2, u3}
  end
  local fresh = redis.call('SET', KEYS[n + 1], '1', 'NX', 'PX', int(px))
  local reply = {fresh and 1 or 0}
  for i = 1, n do
    local l, key = ls[i], KEYS[i]
    local algo, limit, w, burst, md, cost, u1, u2, u3 = l[1], l[2], l[3], l[4], l[5], l[6], l[7], l[8], l[9]
    local back = 0
    if fresh then
      if algo == 1 then
        back = fw_release(key, cost, w, 0, burst, u1, u2, u3)
      elseif algo == 3 then
        back = sw_release(key, cost, w, 0, burst, u1, u2, u3)
      elseif algo == 6 then
        back = qt_release(key, cost, w, 0, burst, u1, u2, u3)
      elseif algo == 2 then
        back = sl_release(key, cost, w, u1, now)
      elseif algo == 4 then
        back = tb_release(key, cost, w, idiv(w, limit), burst, u1, u2, u3)
      else
        back = gc_release(key, cost, w, idiv(w, limit), burst, u1, u2, u3)
      end
    end
    local ok, rem, reset = step(key, algo, limit, w, burst, md, 0, now, false)
    local j = 4 * i - 2
    if ok == nil then
      reply[j], reply[j + 1], reply[j + 2], reply[j + 3] = back, 0, 0, 0
    else
      reply[j], reply[j + 1], reply[j + 2], reply[j + 3] = back, 1, rem, reset
    end
  end
  return reply
end
