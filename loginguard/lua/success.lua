-- success.lua: settle an attempt. Success (ARGV[21] = 0) forgets the
-- account's failures and the pair's failures and lock; the IP keeps its
-- failures. Abandon (ARGV[21] = 1) only ends the attempt's "in progress".
local abandon = arg(21)
local st, ts = load_all()
for d = 1, 3 do
  local s = st[d]
  if s.p > 0 then s.p = s.p - 1 end
  if abandon == 0 then
    if d == 1 then
      s.n = 0
    elseif d == 3 then
      s.n = 0
      s.u = 0
    end
  end
  store(d, s, ts[d])
end
local act, till, by = verdict(st, ts)
return reply(act, till, by, 0, st)
