-- unlock.lua: forget the state of one to three dimensions at once (an
-- administrator's unlock); answers, per key, 1 if it held state, else 0.
if #KEYS < 1 or #KEYS > 3 then
  return redis.error_reply('loginguard: want 1 to 3 keys, got ' .. #KEYS)
end
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = redis.call('DEL', k)
end
return out
