-- unlock.lua: forget one dimension's state (an administrator's unlock).
if #KEYS ~= 1 then
  return redis.error_reply('loginguard: want 1 key, got ' .. #KEYS)
end
return redis.call('DEL', KEYS[1])
