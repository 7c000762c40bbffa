-- release.lua: the release of a reservation (see decide.lua), run when
-- another slot's part of a split decision denied it or failed.
--
-- KEYS[1..n] are the keys of the layers the reservation consumed, KEYS[n+1]
-- the release's marker (in the same slot), and KEYS[n+2..2n+1], when the
-- caller sends them, the layers' release journals (journalKey in split.go;
-- a bucket release reads and writes its layer's, see bucket_refund;
-- without them a bucket release assumes every release since its
-- reservation moved it, as before the journals). ARGV[1] is 'release', or
-- 'bare' for a bare release: one without a marker, whose KEYS are the
-- layers' keys alone (KEYS[1..n]), or those and the journals
-- (KEYS[n+1..2n], a layer that keeps none named by its own key). A bare
-- release touches only keys that exist, which a Redis Cluster node that
-- is migrating their slot runs wherever those keys are: a new key (a
-- marker, a journal not yet written) makes a call naming keys of a
-- migrating slot refused with TRYAGAIN until the move ends (see
-- Store.release). ARGV[2] is
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

local function release(n, now, journals, marked)
  -- The releases of the algorithms are defined here rather than in their
  -- files, so that they are created only when a release runs: Redis runs
  -- the whole script on every call, and every function defined at its top
  -- level costs every decision an allocation.

  -- bucket_refund is the release rule of both bucket algorithms. Seen
  -- through F, the time at which the bucket is full again (GCRA: the TAT;
  -- token bucket: T + (burst - N) x interval), they are one machine: a
  -- request at t of span s (cost x interval) sets F = max(F, t) + s, and
  -- what a request may take at t depends on F - t alone. A reservation
  -- appended the span [f - s, f] to the backlog that ends at F. Until the
  -- backlog empties (a request finds F <= t, which moves A), F only grows
  -- by the spans admitted and shrinks by what releases give back, so the
  -- span's end is e = f minus what releases of spans queued before it
  -- gave back since it was reserved (a release of a span queued after it
  -- moves only what follows that span). A bucket without the reservation
  -- would stand at F - s, or, where requests after it found that shorter
  -- backlog empty, at most H plus the spans queued after it (H the latest
  -- time any admitted request was decided at): it returns min(s, e - H),
  -- the part of the span after H, and nothing once A has moved (the whole
  -- span had leaked).
  --
  -- Which releases moved e is known from the key's release journal
  -- (jkey, in the same slot; see bucket_journal): F + R (R counting every
  -- µs given back) never decreases (a request adds its span to F, a
  -- release moves µs from F to R, an emptying jumps F forward), and grows
  -- with every span queued, so f + r, as the reservation left them, is its
  -- place in the queue: a release journalled after r whose place is below
  -- f + r was queued before it and moved it by what it gave back. When
  -- the journal does not go back to r (it holds the latest 32 releases,
  -- expires with the key, or the caller sent none), every release since r
  -- it does not hold is assumed to have moved the span (never over). fc,
  -- h, ca, cr are the key's current F, H, A, R; f, a, r what the
  -- reservation left; cap the most the state can take back. It returns µs,
  -- at most min(s, cap), possibly <= 0, and journals what it gives.
  local jkey, jpx -- the journal of the layer being released, and its TTL if the key has none
  local JOURNAL_CAP = 32

  -- bucket_journal reads jkey: "A R0 p1 b1 p2 b2 ...", the releases given
  -- since R was R0 while the backlog last emptied at A, in order, each its
  -- queue place and µs given back. A journal of another A, or whose
  -- releases do not add up from R0 to the key's R, is not this backlog's:
  -- it starts again at R.
  local function bucket_journal(ca, cr)
    local j = {}
    local v = jkey and redis.call('GET', jkey)
    if v then
      for x in string.gmatch(v, '%d+') do
        j[#j + 1] = tonumber(x)
      end
    end
    if #j >= 2 and #j % 2 == 0 and j[1] == ca then
      local sum = j[2]
      for i = 3, #j, 2 do
        sum = sum + j[i + 1]
      end
      if sum == cr then
        return j
      end
    end
    return {ca, cr}
  end

  local function bucket_refund(fc, h, ca, cr, s, f, a, r, cap, key)
    if ca ~= a then
      return 0
    end
    local back = s
    local j
    if fc ~= f or cr ~= r then
      j = bucket_journal(ca, cr)
      local shift, rb, place = 0, j[2], f + r
      if r < rb then
        shift = rb - r -- releases no longer journalled: assume they all moved it
      end
      for i = 3, #j, 2 do
        if rb >= r and j[i] < place then
          shift = shift + j[i + 1]
        end
        rb = rb + j[i + 1]
      end
      local e = f - shift
      if ca + s > e then
        e = ca + s -- queued after the last emptying at A, and s long
      end
      if e - h < back then
        back = e - h
      end
    end
    if back > cap then
      back = cap
    end
    if back <= 0 or not jkey then
      return back
    end
    j = j or bucket_journal(ca, cr)
    j[#j + 1], j[#j + 2] = f + r, back
    while #j > 2 + 2 * JOURNAL_CAP do
      j[2] = j[2] + j[4]
      table.remove(j, 3)
      table.remove(j, 3)
    end
    for i = 1, #j do
      j[i] = sfmt('%d', j[i])
    end
    local ttl = redis.call('PTTL', key)
    if ttl < 1 then
      ttl = jpx
    end
    redis.call('SET', jkey, table.concat(j, ' '), 'PX', int(ttl))
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
  -- back when the entry expires. It returns the cost given back, and
  -- whether the set was emptied (the reservation was its only entry).
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
      return 0, false
    end
    local rank = redis.call('ZRANK', key, member)
    local after = redis.call('ZRANGE', key, int(rank + 1), int(rank + 1 + SL_RELEASE_CAP), 'WITHSCORES')
    if #after > 2 * SL_RELEASE_CAP then
      return 0, false
    end
    local old, new = {}, {}
    for i = 1, #after, 2 do
      local c, k = sl_member(after[i])
      if not c then
        return 0, false -- a member floodgate did not write: leave the set alone
      end
      old[#old + 1] = after[i]
      new[#new + 1] = after[i + 1]
      new[#new + 1] = sfmt('%016d:%d', c - cost, k)
    end
    -- The renamed entries are added before the old names are removed, so
    -- the set never empties on the way: an emptied key is deleted, and on
    -- a Redis Cluster node migrating the key's slot, writing it again
    -- would be refused halfway through the script. A new name may equal
    -- an old one (an entry renamed to the name of the one before it): it
    -- stays, with its new score. The renamed entries keep the TTL the key
    -- had (time stands still inside a script, so PTTL then PEXPIRE
    -- restores the same instant). A key found without a TTL (which no
    -- floodgate script leaves) gets the longest a log needs: its newest
    -- entry's life plus the slack.
    if #new > 0 then
      local ttl = redis.call('PTTL', key)
      redis.call('ZADD', key, unpack(new))
      local kept = {}
      for i = 2, #new, 2 do
        kept[new[i]] = true
      end
      local gone = {}
      if not kept[member] then
        gone[1] = member
      end
      for i = 1, #old do
        if not kept[old[i]] then
          gone[#gone + 1] = old[i]
        end
      end
      if #gone > 0 then
        redis.call('ZREM', key, unpack(gone))
      end
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
      -- The set empties when the reservation was its only entry: Redis
      -- then deletes the key, and the standing after the release is
      -- known without reading it (reading a key deleted in a slot being
      -- migrated fails the script, on the source node, with the release
      -- half done).
      local emptied = redis.call('ZCARD', key) == 1
      redis.call('ZREM', key, member)
      return cost, emptied
    end
    return cost, false
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
  local fresh = true
  if marked then
    fresh = redis.call('SET', KEYS[n + 1], '1', 'NX', 'PX', int(px))
  end
  local reply = {fresh and 1 or 0}
  for i = 1, n do
    local l, key = ls[i], KEYS[i]
    local algo, limit, w, burst, md, cost, u1, u2, u3 = l[1], l[2], l[3], l[4], l[5], l[6], l[7], l[8], l[9]
    local back, emptied = 0, false
    jkey, jpx = journals and KEYS[(marked and n + 1 or n) + i], px
    if fresh then
      if algo == 1 then
        back = fw_release(key, cost, w, 0, burst, u1, u2, u3)
      elseif algo == 3 then
        back = sw_release(key, cost, w, 0, burst, u1, u2, u3)
      elseif algo == 6 then
        back = qt_release(key, cost, w, 0, burst, u1, u2, u3)
      elseif algo == 2 then
        back, emptied = sl_release(key, cost, w, u1, now)
      elseif algo == 4 then
        back = tb_release(key, cost, w, idiv(w, limit), burst, u1, u2, u3)
      else
        back = gc_release(key, cost, w, idiv(w, limit), burst, u1, u2, u3)
      end
    end
    local ok, rem, reset = true, limit, now -- an emptied log's standing, as a peek of no key
    if not emptied then
      ok, rem, reset = step(key, algo, limit, w, burst, md, 0, now, false)
    end
    local j = 4 * i - 2
    if ok == nil then
      reply[j], reply[j + 1], reply[j + 2], reply[j + 3] = back, 0, 0, 0
    else
      reply[j], reply[j + 1], reply[j + 2], reply[j + 3] = back, 1, rem, reset
    end
  end
  return reply
end
