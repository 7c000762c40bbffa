-- fast_tail.lua: the end of the single-layer scripts (see fast_head.lua).
  until true
  if val then -- only set by a request decided and admitted
    if hot then
      if not px_of[key] then
        dirty[#dirty + 1] = key
      end
      cache[key], px_of[key] = val, px
    else
      redis.call('SET', key, val, 'PX', sfmt('%d', px))
    end
  elseif code then
    if nk == 1 then
      return redis.error_reply(msg)
    end
    reply[ri + 1], reply[ri + 2], reply[ri + 3], reply[ri + 4], reply[ri + 5], reply[ri + 6] = 0, 0, 0, 0, 0, code
  end
end
if hot then
  for d = 1, #dirty do
    local key = dirty[d]
    redis.call('SET', key, cache[key], 'PX', sfmt('%d', px_of[key]))
  end
end
return reply
