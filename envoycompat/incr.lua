-- envoy-compat's counter update (envoycompat/store.go), in one atomic run:
-- for each key i, INCRBY KEYS[i] ARGV[2i-1], then EXPIRE KEYS[i] ARGV[2i]
-- (seconds), the commands envoyproxy/ratelimit sends for a counter, on the
-- same keys. The keys may belong to several requests sent together; they
-- are updated in order, a repeated key once per occurrence.
--
-- Reply: the value of each counter after its INCRBY, in KEYS order,
-- followed by the index (1-based) of every key whose INCRBY Redis refused
-- (the key holds something other than an integer, or the sum would
-- overflow): nothing was written for that key and its value slot is 0.
-- The other keys are updated all the same. When Redis refuses every
-- INCRBY as a server that refuses writes (an error starting OOM, such as
-- "OOM command not allowed when used memory > 'maxmemory'", READONLY,
-- MISCONF or NOREPLICAS: it refuses them all, whatever the key), the reply
-- is Redis's own error for the first, and nothing was written. A key
-- refused for itself (WRONGTYPE, "ERR value is not an integer", an
-- overflow) stays in the index list even when every key is refused, so
-- that a refused key is answered alike alone and beside healthy ones.
--
-- A counter saturates at 2^52: one past it is set back to 2^52 (every
-- limit is far below it), so that a huge hits_addend cannot push a counter
-- where Redis refuses the next INCRBY (2^63-1) or where Lua's doubles, and
-- so this script's replies, stop being exact (2^53).
if #ARGV ~= 2 * #KEYS then
  return redis.error_reply('floodgate envoy-compat: want 2 arguments per key, got ' .. #ARGV .. ' for ' .. #KEYS .. ' keys')
end
local out, refused, first = {}, {}, nil
for i = 1, #KEYS do
  local n = redis.pcall('INCRBY', KEYS[i], ARGV[2 * i - 1])
  if type(n) == 'number' then
    if n > 4503599627370496 then
      redis.call('SET', KEYS[i], '4503599627370496')
      n = 4503599627370496
    end
    redis.call('EXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = n
  else
    out[i] = 0
    refused[#refused + 1] = i
    first = first or n
  end
end
if #refused == #KEYS and type(first) == 'table' and type(first.err) == 'string' then
  local code = string.match(first.err, '^%u+')
  if code == 'OOM' or code == 'READONLY' or code == 'MISCONF' or code == 'NOREPLICAS' then
    return first
  end
end
for _, i in ipairs(refused) do
  out[#out + 1] = i
end
return out
