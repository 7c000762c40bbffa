-- fast_tail.lua: the end of the single-layer scripts' loop over requests
-- (see fast_head.lua); fast_end.lua follows it.
  until true
  if val then -- only set by a request decided and admitted
    if hot then
      local old = px_of[key]
      if old == nil then
        local d = #dirty -- not written yet in this call: v is the stored value
        dirty[d + 1], dirty[d + 2] = key, v and #v or -1
      end
      if old == nil or px > 0 then -- a -1 leaves a PX decided earlier in the call, for the same end
        px_of[key] = px
      end
      cache[key] = val
    elseif px > 0 then
      redis.call('SET', key, val, 'PX', sfmt('%d', px))
    elseif #val == #v then -- the key's TTL kept, its value overwritten in place (see fast_head.lua)
      redis.call('SETRANGE', key, '0', val)
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
