-- lease.lua: one lease operation on one identity, atomically. It mirrors
-- MemoryStore.apply in memory.go; keep them in step.
--
-- KEYS[1] sorted set of the identity's leases: member lease id, score its
--   expiry (Unix µs of the caller's clock; the script never reads TIME)
-- ARGV: op (a acquire, r release, n renew), now, limit, ttl (µs), id,
--   max_trim
-- Reply: {ok, count, at}
--   acquire: ok 1 = taken, count = live leases after, at = its expiry;
--            ok 0 = full, count = live leases, at = when a slot frees by
--            expiry alone: the (live - limit + 1)-th earliest live expiry
--   release: ok 1 = a live lease was freed
--   renew:   ok 1 = still held, at = its new expiry

local op = ARGV[1]
local now = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local id = ARGV[5]
local max_trim = tonumber(ARGV[6])
if not (now and limit and ttl and max_trim) or id == nil or id == ''
    or (op ~= 'a' and op ~= 'r' and op ~= 'n')
    or ((op == 'a' or op == 'n') and ttl < 1) or (op == 'a' and limit < 1)
    or max_trim < 1 or #KEYS ~= 1 then
  return redis.error_reply('ERR floodgate lease: invalid arguments')
end

local K = KEYS[1]
local function int(n) return string.format('%d', n) end

-- Drop up to max_trim expired leases; the live count below is exact
-- whatever is left, because it counts by score.
local gone = redis.call('ZRANGEBYSCORE', K, '-inf', int(now), 'LIMIT', 0, max_trim)
if #gone > 0 then redis.call('ZREM', K, unpack(gone)) end

-- Keeps the key until its last lease expires.
local function keep_key()
  local last = redis.call('ZRANGE', K, -1, -1, 'WITHSCORES')
  if #last == 2 then
    local ms = math.ceil((tonumber(last[2]) - now) / 1000)
    if ms < 1 then ms = 1 end
    redis.call('PEXPIRE', K, ms)
  end
end

if op == 'a' then
  local live = redis.call('ZCOUNT', K, '(' .. int(now), '+inf')
  if live >= limit then
    -- A slot frees when live falls below limit: at the (live - limit + 1)-th
    -- earliest expiry, the earliest while the leases fill the limit.
    local first = redis.call('ZRANGEBYSCORE', K, '(' .. int(now), '+inf', 'WITHSCORES', 'LIMIT', live - limit, 1)
    return {0, live, tonumber(first[2]) or 0}
  end
  local at = now + ttl
  if redis.call('ZADD', K, 'NX', int(at), id) == 0 then
    return redis.error_reply('ERR floodgate lease: lease id already held')
  end
  keep_key()
  return {1, live + 1, at}
end

local at = tonumber(redis.call('ZSCORE', K, id))
if op == 'r' then
  if not at then return {0, 0, 0} end
  redis.call('ZREM', K, id)
  if at > now then return {1, 0, 0} end
  return {0, 0, 0}
end

-- renew
if not at or at <= now then
  if at then redis.call('ZREM', K, id) end
  return {0, 0, 0}
end
if now + ttl > at then
  at = now + ttl
  redis.call('ZADD', K, 'XX', int(at), id)
  keep_key()
end
return {1, 0, at}
