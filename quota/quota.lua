-- quota.lua: one quota operation on one identity, atomically. It mirrors
-- step in ledger.go; keep them in step.
--
-- KEYS[1] usage hash: used, held, h:<id> = held estimate, s:<id> = outcome
-- KEYS[2] sorted set of live holds: member id, score expiry (Unix µs)
-- KEYS[3] sorted set of settlement outcomes: member id, score expiry
-- KEYS[4] marker, the string '1', written with the usage and outliving
--   it; any other value there is refused as foreign
-- KEYS[5..8] (settle and reserve) the previous period's usage, holds,
--   outcomes and marker
-- ARGV: op (c check, r reserve, s settle, x restore), now, limit, amount,
--   id, hold, keep, expire_at, prev_expire_at, marker_at, max_pending,
--   max_settled, max_trim, max_used, prev_guard (1: the previous
--   period's usage cannot have expired yet, so missing while its marker
--   remains it was lost). Times are the caller's Unix µs; the
--   script never reads the server's clock.
-- Reply: {status, used, held, charged, refunded, unmatched, in_prev, hint,
--   before}
-- status: 0 allowed, 1 denied, 2 cost exceeds limit, 3 too many pending,
--   4 replayed, 5 state lost, 6 id already settled.
-- hint: for a denial (1, 3), the expiry at which enough holds have gone
--   for it to fit (fits_at), or 0.
-- before: for a restore, the usage it replaced (0 when the period had
--   none, -1 when it was lost: missing while the marker remained).

local op = ARGV[1]
local now = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local amount = tonumber(ARGV[4])
local id = ARGV[5]
local hold = tonumber(ARGV[6])
local keep = tonumber(ARGV[7])
local expire_at = tonumber(ARGV[8])
local prev_expire_at = tonumber(ARGV[9])
local marker_at = tonumber(ARGV[10])
local max_pending = tonumber(ARGV[11])
local max_settled = tonumber(ARGV[12])
local max_trim = tonumber(ARGV[13])
local max_used = tonumber(ARGV[14])
local prev_guard = ARGV[15] == '1'

if not (now and limit and amount and hold and keep and expire_at and prev_expire_at
    and marker_at and max_pending and max_settled and max_trim and max_used)
    or (op ~= 'c' and op ~= 'r' and op ~= 's' and op ~= 'x')
    or limit < 1 or amount < 0 or amount > max_used or hold < 1 or keep < 1
    or max_pending < 1 or max_settled < 1 or max_trim < 1
    or #KEYS < 4 or ((op == 's' or op == 'r') and #KEYS < 8) or (op ~= 'c' and op ~= 'x' and id == '') then
  return redis.error_reply('ERR floodgate quota: invalid arguments')
end

local function int(n) return string.format('%d', n) end
local function pttl(at)
  local ms = math.ceil((at - now) / 1000)
  if ms < 1 then ms = 1 end
  return ms
end
-- Sets k's TTL to ms unless it already lives longer: a TTL is never
-- shortened. Calendars differing only in their zone share a period's
-- keys (floodgate.Calendar.StorageTag has no zone), and a write under the
-- zone whose period ends sooner must not end the usage another zone
-- still counts.
local function extend(k, ms)
  if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, ms) end
end

-- A marker holds what this script writes there, the string '1', or is
-- missing. Anything else (another string, a list, a hash...) is a value
-- floodgate did not write: the run is refused before its first write, as
-- a usage key of the wrong type is (WRONGTYPE), rather than read as a
-- marker (state lost) and then overwritten.
local function marker_live(k)
  local t = redis.call('TYPE', k)['ok']
  if t == 'none' then return false end
  if t ~= 'string' or redis.call('GET', k) ~= '1' then
    return nil
  end
  return true
end
local function foreign(k)
  return redis.error_reply('ERR floodgate: key ' .. k .. ' holds a value floodgate did not write')
end

local U, H, S = KEYS[1], KEYS[2], KEYS[3]
local state = redis.call('HMGET', U, 'used', 'held')
local used, held = tonumber(state[1]), tonumber(state[2]) or 0
local exists = used ~= nil
local marked = marker_live(KEYS[4])
if marked == nil then return foreign(KEYS[4]) end
local prev_marked = false
if op == 's' and prev_guard then
  prev_marked = marker_live(KEYS[8])
  if prev_marked == nil then return foreign(KEYS[8]) end
end
if not exists then
  if op ~= 'x' and marked then
    return {5, 0, 0, 0, 0, 0, 0, 0, 0}
  end
  used, held = 0, 0
end
local dirty = false

-- Trim: drop up to max_trim expired holds (giving their estimates back)
-- and up to max_trim expired settlement outcomes. No sweeper is needed.
if exists then
  local gone = redis.call('ZRANGEBYSCORE', H, '-inf', int(now), 'LIMIT', 0, max_trim)
  if #gone > 0 then
    local f = {}
    for i = 1, #gone do f[i] = 'h:' .. gone[i] end
    local amts = redis.call('HMGET', U, unpack(f))
    for i = 1, #gone do held = held - (tonumber(amts[i]) or 0) end
    redis.call('HDEL', U, unpack(f))
    redis.call('ZREM', H, unpack(gone))
    dirty = true
  end
  local old = redis.call('ZRANGEBYSCORE', S, '-inf', int(now), 'LIMIT', 0, max_trim)
  if #old > 0 then
    local f = {}
    for i = 1, #old do f[i] = 's:' .. old[i] end
    redis.call('HDEL', U, unpack(f))
    redis.call('ZREM', S, unpack(old))
    dirty = true
  end
end

local status, charged, refunded, unmatched, in_prev, hint, before = 0, 0, 0, 0, 0, 0, 0
local r_used, r_held = nil, nil
local bad_record = false

-- When enough holds will have expired for need more units to fit: walking
-- them in expiry order, 64 at a time, the expiry of the first at which
-- the estimates given back reach what used, held and need exceed the
-- limit by; 0 when they never will; the 128th's (maxWalk in quota.go)
-- when the first 128 do not free enough. It mirrors ledger.fitsAt.
local function fits_at(need)
  if used + need > limit then return 0 end
  local over, freed, last = used + held + need - limit, 0, 0
  for i = 0, 64, 64 do
    local ids = redis.call('ZRANGE', H, i, i + 63, 'WITHSCORES')
    local f = {}
    for j = 1, #ids, 2 do f[#f + 1] = 'h:' .. ids[j] end
    if #f == 0 then return last end
    local amts = redis.call('HMGET', U, unpack(f))
    for j = 1, #amts do
      freed = freed + (tonumber(amts[j]) or 0)
      last = tonumber(ids[2 * j])
      if freed >= over then return last end
    end
  end
  return last
end
local function deny(need)
  status = 1
  hint = fits_at(need)
end
local function replay(rec)
  local a, b, c, d, e = string.match(rec, '^(%d+):(%-?%d+):(%d+):(%d+):([01])$')
  if not a then bad_record = true return end
  status = 4
  r_used, r_held, charged, refunded, unmatched = tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(e)
end
-- Removes id's hold from the current period; returns its estimate and
-- expiry, or nil.
local function take_hold()
  local at = tonumber(redis.call('ZSCORE', H, id))
  if not at then return nil, nil end
  local est = tonumber(redis.call('HGET', U, 'h:' .. id)) or 0
  redis.call('HDEL', U, 'h:' .. id)
  redis.call('ZREM', H, id)
  held = held - est
  dirty = true
  return est, at
end

if op == 'c' then
  if amount > limit then
    status = 2
  elseif amount == 0 then
    if used + held >= limit then deny(1) end
  elseif used + held + amount <= limit then
    used = used + amount
    charged = amount
    dirty = true
  else
    deny(amount)
  end
elseif op == 'r' then
  if redis.call('HEXISTS', U, 's:' .. id) == 1 then
    status = 6
  else
    local live = false
    local at = tonumber(redis.call('ZSCORE', H, id))
    if at and at <= now then
      take_hold() -- expired, not trimmed yet
    elseif at then
      live = true
    end
    -- An id the previous period knows was reserved before the boundary:
    -- settled there, it is refused; still held there, it is replayed with
    -- that period's standing (neither holds nor charges twice).
    if not live and redis.call('EXISTS', KEYS[5]) == 1 then
      if redis.call('HEXISTS', KEYS[5], 's:' .. id) == 1 then
        status, in_prev = 6, 1
      else
        local pat = tonumber(redis.call('ZSCORE', KEYS[6], id))
        if pat and pat > now then
          status, in_prev = 4, 1
          local p = redis.call('HMGET', KEYS[5], 'used', 'held')
          r_used, r_held = tonumber(p[1]) or 0, tonumber(p[2]) or 0
        end
      end
    end
    if in_prev == 1 then
      -- answered by the previous period
    elseif live then
      status = 4
    elseif amount > limit then
      status = 2
    elseif redis.call('ZCARD', H) >= max_pending then
      status = 3
      hint = fits_at(amount)
      if hint > 0 then
        -- Not before enough holds expired to bring them under max_pending
        -- (the first maxWalk at most, as in fits_at).
        local k = math.min(redis.call('ZCARD', H) - max_pending, 127)
        local e = redis.call('ZRANGE', H, k, k, 'WITHSCORES')
        if e[2] then hint = math.max(hint, tonumber(e[2])) end
      end
    elseif used + held + amount <= limit then
      held = held + amount
      redis.call('HSET', U, 'h:' .. id, int(amount))
      redis.call('ZADD', H, int(now + hold), id)
      dirty = true
    else
      deny(amount)
    end
  end
elseif op == 's' then
  local rec = redis.call('HGET', U, 's:' .. id)
  if rec then
    replay(rec)
  else
    local tu, th, ts, tat = U, H, S, expire_at
    local t_used, t_held = used, held
    local est, at = take_hold()
    local matched = at ~= nil and at > now
    local target_prev = false
    if at then
      t_held = held
    elseif redis.call('EXISTS', KEYS[5]) == 1 then
      local prec = redis.call('HGET', KEYS[5], 's:' .. id)
      if prec then
        replay(prec)
        in_prev = 1
      else
        local pat = tonumber(redis.call('ZSCORE', KEYS[6], id))
        if pat and pat > now then
          tu, th, ts, tat = KEYS[5], KEYS[6], KEYS[7], prev_expire_at
          local p = redis.call('HMGET', tu, 'used', 'held')
          est = tonumber(redis.call('HGET', tu, 'h:' .. id)) or 0
          t_used, t_held = tonumber(p[1]) or 0, (tonumber(p[2]) or 0) - est
          redis.call('HDEL', tu, 'h:' .. id)
          redis.call('ZREM', th, id)
          matched, target_prev, in_prev = true, true, 1
        end
      end
    elseif prev_marked then
      -- The previous period's usage is lost inside its settle window: the
      -- id may have been reserved or settled there. Refuse, charging
      -- nothing (a trim of the current period above is still saved).
      status, in_prev = 5, 1
    end
    if status ~= 4 and status ~= 5 and not bad_record then
      local before = t_used
      t_used = math.min(t_used + amount, max_used)
      charged = t_used - before
      if matched then
        refunded = math.max(est - amount, 0)
      else
        unmatched = 1
      end
      redis.call('HSET', tu, 's:' .. id,
        int(t_used) .. ':' .. int(t_held) .. ':' .. int(charged) .. ':' .. int(refunded) .. ':' .. unmatched)
      redis.call('ZADD', ts, int(now + keep), id)
      if redis.call('ZCARD', ts) > max_settled then
        local oldest = redis.call('ZRANGE', ts, 0, 0)
        redis.call('HDEL', tu, 's:' .. oldest[1])
        redis.call('ZREM', ts, oldest[1])
      end
      r_used, r_held = t_used, t_held
      if target_prev then
        redis.call('HSET', tu, 'used', int(t_used), 'held', int(t_held))
        local ms = pttl(tat)
        extend(tu, ms)
        extend(th, ms)
        extend(ts, ms)
      else
        used, held = t_used, t_held
        dirty = true
      end
    end
  end
else -- restore
  if exists then
    before = used
  else
    if marked then before = -1 end
    redis.call('DEL', H, S)
  end
  used = amount
  dirty = true
end

if dirty then
  redis.call('HSET', U, 'used', int(used), 'held', int(held))
  local ms = pttl(expire_at)
  extend(U, ms)
  extend(H, ms)
  extend(S, ms)
  redis.call('SET', KEYS[4], '1', 'PX', math.max(redis.call('PTTL', KEYS[4]), pttl(marker_at)))
end
if bad_record then
  return redis.error_reply('ERR floodgate quota: corrupt settlement record for ' .. id)
end
if r_used == nil then r_used, r_held = used, held end
return {status, r_used, r_held, charged, refunded, unmatched, in_prev, hint, before}
