-- failure.lua: count a failed attempt in every dimension; the failure that
-- reaches a dimension's lock threshold while it is unlocked locks it.
local st, ts = load_all()
local crossed = 0
for d = 1, 3 do
  local s, l = st[d], dims[d]
  s.n = s.n + 1
  if s.p > 0 then s.p = s.p - 1 end
  s.t = ts[d]
  if l.lock > 0 and s.n >= l.lock and s.u == 0 then
    s.u = ts[d] + l.lockout
    crossed = crossed + 2 ^ (d - 1)
  end
  store(d, s, ts[d])
end
local act, till, by = verdict(st, ts)
return reply(act, till, by, crossed, st)
