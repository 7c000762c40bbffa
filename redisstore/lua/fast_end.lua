-- fast_end.lua: the end shared by the single-layer scripts (after
-- fast_tail.lua) and the layered script (after fast_layers.lua). It
-- writes the keys whose writes were deferred to the end of the call
-- (dirty: each key followed by its stored value's length, -1 when there
-- was none; nil when nothing was deferred), each once, with its PX, or in
-- place keeping its TTL when its value keeps its length (see
-- fast_head.lua), and returns the reply: four integers per request (or
-- per layer), packed in one string when the call asked for it.
if dirty then
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
  -- Each integer a little-endian double, in one string. unpack puts the
  -- numbers it returns on Lua's C stack, which holds at most 8,000: a
  -- long reply is packed in parts of 1,024.
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
