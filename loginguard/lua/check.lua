-- check.lua: decide an attempt; when it may proceed (allow or captcha),
-- count it as in progress in every dimension. With peek, write nothing.
local peek = arg(21)
local st, ts = load_all()
local act, till, by = verdict(st, ts)
if peek == 0 and act <= CAPTCHA then
  for d = 1, 3 do
    st[d].p = st[d].p + 1
    st[d].t = ts[d]
    store(d, st[d], ts[d])
  end
end
return reply(act, till, by, 0, st)
