-- One heartbeat of the fleet's sorted set KEYS[1]: ARGV[1] is the
-- instance id, ARGV[2] now in Unix milliseconds, or "" for Redis's own
-- TIME, ARGV[3] the TTL in milliseconds. Returns the number of live
-- instances and 1 if this instance was not in the set (its first beat,
-- or the set was lost: a Redis restarted empty), 0 otherwise.
local now = tonumber(ARGV[2])
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl = tonumber(ARGV[3])
if not now or not ttl or ttl <= 0 then
  return redis.error_reply("ERR fleet: bad arguments")
end
local added = redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return {redis.call('ZCARD', KEYS[1]), added}
