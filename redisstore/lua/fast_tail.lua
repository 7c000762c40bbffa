-- fast_tail.lua: the end of the single-layer scripts (see fast_head.lua).
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
if hot then
  for d = 1, #dirty, 2 do
    local key = dirty[d]
    local px, val = px_of[key], cache[key]
    if px > 0 then
      redis.call('SET', key, val, 'PX', sfmt('%d', px))
    elseif #val == dirty[d + 1] then
      redis.call('SETRANGE', key, '0', val)
    else
      redis.call('SET', key, val, 'KEEPTTL')
    end
  end
end
if packed then
  -- The reply packed: its integers, four per request, each a little-endian
  -- double, in one string. unpack puts the numbers it returns on Lua's C
  -- stack, which holds at most 8,000: a long reply is packed in parts of
  -- 1,024.
  local m = 4 * nk
  if m <= 1024 then
    return spack('<' .. srep('d', m), unpack(reply, 1, m))
  end
  local parts = {}
  for x = 1, m, 1024 do
    local y = x + 1023
    if y > m then
      y = m
    end
    parts[#parts + 1] = spack('<' .. srep('d', y - x + 1), unpack(reply, x, y))
  end
  return concat(parts)
end
return reply
