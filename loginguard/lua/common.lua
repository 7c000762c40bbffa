-- loginguard: the part shared by check.lua, failure.lua and success.lua.
-- It mirrors step.go exactly (same names, same order of operations); the
-- shared vectors in vectors_test.go hold the two to the same results.
--
-- KEYS: the account, IP and pair states (hashes n, p, t, u), one hash tag.
-- ARGV: 1 now (Unix µs, the caller's clock; TIME is never called)
--       2..16 per dimension (account, ip, pair): captcha, delay, lock,
--             window (µs), lockout (µs)
--       17 base delay (µs), 18 max delay (µs), 19 attempt timeout (µs),
--       20 strict account lock (0/1), 21 mode (check.lua: 1 peeks;
--       success.lua: 1 abandons)
-- Every value is validated by the Go caller and guarded again here.

if #KEYS ~= 3 then
  return redis.error_reply('loginguard: want 3 keys, got ' .. #KEYS)
end

local function arg(i)
  local v = tonumber(ARGV[i])
  if v == nil or v < 0 or v ~= math.floor(v) or v > 9007199254740991 then
    error('loginguard: ARGV[' .. i .. '] is not a non-negative integer')
  end
  return v
end

local now = arg(1)
local dims = {}
for d = 1, 3 do
  local b = 2 + (d - 1) * 5
  dims[d] = {captcha = arg(b), delay = arg(b + 1), lock = arg(b + 2),
             window = arg(b + 3), lockout = arg(b + 4)}
end
local base_delay, max_delay = arg(17), arg(18)
local attempt_timeout, strict = arg(19), arg(20)
if base_delay < 1 or max_delay < base_delay or attempt_timeout < 1 then
  error('loginguard: bad delays or attempt timeout')
end

local ALLOW, CAPTCHA, DELAY, LOCKED = 0, 1, 2, 3

-- load reads dimension d's state; a missing key is the fresh state.
local function load(d)
  local v = redis.call('HMGET', KEYS[d], 'n', 'p', 't', 'u')
  return {n = tonumber(v[1]) or 0, p = tonumber(v[2]) or 0,
          t = tonumber(v[3]) or 0, u = tonumber(v[4]) or 0}
end

-- normalize forgets what has expired and returns the time to judge the
-- state at (never before its own last attempt).
local function normalize(d, s)
  local t = now
  if t < s.t then t = s.t end
  if s.n > 0 and t - s.t >= dims[d].window then s.n = 0 end
  if s.p > 0 and t - s.t >= attempt_timeout then s.p = 0 end
  if s.u <= t then s.u = 0 end
  return t
end

local function delay_for(k)
  local d = base_delay
  local i = 0
  while i < k and d < max_delay do
    d = d * 2
    i = i + 1
  end
  if d > max_delay then d = max_delay end
  return d
end

-- dim_verdict: attempts in progress count towards the lock too; while
-- failures plus attempts in progress reach it, wait for those to be
-- settled or to expire (step.go's dimVerdict says why). The Delay rung's
-- wait ends no later than the attempts in progress expire, unless the
-- failures alone hold it longer.
local function dim_verdict(d, s, t)
  if s.u > t then return LOCKED, s.u end
  local l = dims[d]
  local e = s.n + s.p
  local till = 0
  if l.delay > 0 and e >= l.delay then
    local fin = s.t + delay_for(e - l.delay)
    if s.p > 0 then
      -- the attempts in progress expire at s.t + attempt_timeout; the
      -- failures alone count from then (step.go's dimVerdict says why)
      local expiry = s.t + attempt_timeout
      if s.n >= l.delay and s.t + delay_for(s.n - l.delay) > expiry then
        expiry = s.t + delay_for(s.n - l.delay)
      end
      if expiry < fin then fin = expiry end
    end
    if t < fin then till = fin end
  end
  if l.lock > 0 and s.p > 0 and e >= l.lock and s.t + attempt_timeout > till then
    till = s.t + attempt_timeout
  end
  if till > 0 then return DELAY, till end
  if l.captcha > 0 and e >= l.captcha then return CAPTCHA, 0 end
  return ALLOW, 0
end

-- verdict: the most severe action wins, the later end on a tie, the first
-- dimension on an exact tie; unless strict, an account delay or lock is
-- only a CAPTCHA for a pair with a clean record.
local function verdict(st, ts)
  local acts, tills = {}, {}
  for d = 1, 3 do acts[d], tills[d] = dim_verdict(d, st[d], ts[d]) end
  if strict == 0 and st[3].n + st[3].p == 0 and acts[1] > CAPTCHA then
    acts[1], tills[1] = CAPTCHA, 0
  end
  local best = 1
  for d = 2, 3 do
    if acts[d] > acts[best] or (acts[d] == acts[best] and tills[d] > tills[best]) then
      best = d
    end
  end
  if acts[best] == ALLOW then return ALLOW, 0, 0 end
  return acts[best], tills[best], best
end

-- int formats an integer exactly (tostring would use %.14g).
local function int(x) return string.format('%.0f', x) end

-- store writes dimension d's state with its TTL in the same call, or
-- deletes it when it is fresh: no key ever lives without a TTL.
local function store(d, s, t)
  if s.n == 0 and s.p == 0 and s.u == 0 then
    redis.call('DEL', KEYS[d])
    return
  end
  local exp = 0
  if s.n > 0 then exp = s.t + dims[d].window end
  if s.p > 0 and s.t + attempt_timeout > exp then exp = s.t + attempt_timeout end
  if s.u > exp then exp = s.u end
  local ms = math.floor((exp - t + 999) / 1000)
  if ms < 1 then ms = 1 end
  redis.call('HSET', KEYS[d], 'n', int(s.n), 'p', int(s.p), 't', int(s.t), 'u', int(s.u))
  redis.call('PEXPIRE', KEYS[d], ms)
end

local function load_all()
  local st, ts = {}, {}
  for d = 1, 3 do
    st[d] = load(d)
    ts[d] = normalize(d, st[d])
  end
  return st, ts
end

local function reply(act, till, by, crossed, st)
  local out = {act, till, by, crossed}
  for d = 1, 3 do
    local s = st[d]
    out[#out + 1] = s.n
    out[#out + 1] = s.p
    out[#out + 1] = s.t
    out[#out + 1] = s.u
  end
  return out
end
