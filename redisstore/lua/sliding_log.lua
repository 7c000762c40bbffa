-- sliding_log.lua: floodgate.SlidingLog, a mirror of stepSlidingLog.
--
-- State: one sorted set. Each admitted request is one member, scored by its
-- admission time (µs), named "CUM:COST": COST is the request's cost and CUM
-- the running total of the costs admitted into this set, this one included,
-- zero-padded to 16 digits. CUM strictly increases, so members are unique
-- and, among equal scores, sort in admission order, like floodgate's log.
-- The live cost (entries newer than now − window) is then
-- lastCUM − firstLiveCUM + firstLiveCOST: two O(log n) reads, no companion
-- key and no loop. CUM restarts at 0 whenever the set expires; it grows by
-- at most Limit per window, so it would reach 2^53 only after years of one
-- key admitting 100000 units every millisecond without a pause.
--
-- The set holds at most Limit (≤ 100000) members: every member costs at
-- least 1, expired members are removed whenever a request is admitted, and
-- nothing is added otherwise.

-- sl_member splits a member into CUM, COST (nil if it is not one of ours).
local function sl_member(m)
  local c, k = smatch(m, '^(%d+):(%d+)$')
  if not c then
    return nil
  end
  return tonumber(c), tonumber(k)
end

-- sl_step reads the set and decides. It returns the usual ten values (the
-- state slots are the new member's time, CUM and COST), or nil if the set
-- holds a foreign member.
local function sl_step(key, now, limit, w, cost)
  local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  local lastCum, lastAt, sum, base, firstCost, firstAt = 0, 0, 0, 0, 0, 0
  if last[1] then
    local k
    lastCum, k = sl_member(last[1])
    lastAt = tonumber(last[2])
    if not lastCum or not lastAt then
      return nil
    end
    if now < lastAt then
      now = lastAt
    end
    local first = redis.call('ZRANGEBYSCORE', key, '(' .. int(now - w), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    if first[1] then
      local fc
      fc, firstCost = sl_member(first[1])
      firstAt = tonumber(first[2])
      if not fc or not firstAt then
        return nil
      end
      base = fc - firstCost
      sum = lastCum - base
    end
  end
  local allowed, reason = admit(limit - sum, cost, limit)
  local reset = now
  if sum > 0 then
    reset = lastAt + w
  end
  if allowed and cost > 0 then
    sum = sum + cost
    reset = now + w
  end
  local retry = 0
  if reason == LIMITED then
    -- The oldest live entries whose expiry frees enough room: the first
    -- live member whose CUM reaches base + need, found by binary search
    -- over ranks (at most 17 probes for 100000 members).
    local need = cost
    if need < 1 then
      need = 1
    end
    local target = base + sum + need - limit
    local at = firstAt
    if base + firstCost < target then
      local lo = redis.call('ZCOUNT', key, '-inf', int(now - w)) -- rank of the first live member
      local hi = redis.call('ZCARD', key) - 1                     -- the last member reaches target
      at = lastAt
      while hi - lo > 1 do
        local mid = floor((lo + hi) / 2)
        local e = redis.call('ZRANGE', key, int(mid), int(mid), 'WITHSCORES')
        local c = e[1] and sl_member(e[1])
        if not c then
          return nil
        end
        if c >= target then
          hi, at = mid, tonumber(e[2])
        else
          lo = mid
        end
      end
    end
    retry = at + w - now
  end
  return allowed, limit - sum, reset, retry, 0, reason, now, lastCum + cost, cost, reset - now
end

-- sl_write adds the new member and then drops the expired ones (if the
-- set was not empty). In that order the set never empties on the way: an
-- emptied key is deleted, and on a Redis Cluster node migrating the key's
-- slot, writing it again would be refused halfway through the script,
-- after other layers were written. The new member is never expired (its
-- score is at, above at - w) and its name is new (CUM increases).
local function sl_write(key, at, cum, cost, px, w)
  redis.call('ZADD', key, int(at), sfmt('%016d:%d', cum, cost))
  if cum > cost then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(at - w))
  end
  redis.call('PEXPIRE', key, int(px))
end
