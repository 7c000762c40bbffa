-- fast_tail.lua: the end of the single-layer scripts (see fast_head.lua).
  until true
  if val then -- only set by a request decided and admitted
    if hot then
      local old = px_of[key]
      if old == nil then
        dirty[#dirty + 1] = key
      end
      if old == nil or px > 0 then -- a -1 leaves a PX decided earlier in the call, for the same end
        px_of[key] = px
      end
      cache[key] = val
    elseif px > 0 then
      redis.call('SET', key, val, 'PX', sfmt('%d', px))
    else
      redis.call('SET', key, val, 'KEEPTTL')
    end
  elseif code then
    if nk == 1 then
      return redis.error_reply(msg)
    end
    reply[ri + 1], reply[ri + 2], reply[ri + 3], reply[ri + 4] = code, 0, 0, 0
  end
end
if hot then
  for d = 1, #dirty do
    local key = dirty[d]
    local px = px_of[key]
    if px > 0 then
      redis.call('SET', key, cache[key], 'PX', sfmt('%d', px))
    else
      redis.call('SET', key, cache[key], 'KEEPTTL')
    end
  end
end
return reply
