-- toolgate's limiter work for one tenant, as one atomic step on Redis's
-- clock: the ends (settles) and admissions of that tenant's requests that
-- queued on this replica while its previous batch was in Redis, in the
-- order they came (src/limiter/gcra.rs holds the same arithmetic and its
-- reasons). Times are microseconds. A request counts against one or more
-- subjects (its tenant, a managed key's own share), all under the
-- tenant's hash tag.
--
-- Every op names its request's record (KEYS, first): 'h' while its
-- admission holds slots and a reservation, 'x' once it was settled or
-- released. A settle is idempotent (a settle or release sent again after
-- a timeout changes nothing), and an admission that reaches Redis after
-- its release (its call timed out on the replica's side) takes nothing.
--
-- ARGV: 1 lease (µs), then each op in turn:
--   admission: 'a', member, subjects, reserved tokens, then per subject:
--     requests/min, tokens/min, concurrent, budget (0: none), reserved
--     spend, spend when the period has none (-1: zero, -2: ask, else that
--     figure), budget keys' lifetime (s);
--     KEYS: record, then per subject: requests TAT, tokens TAT, in-flight
--     set, budget spent, budget held
--   settle: 's', member, tokens used, tokens reserved, subjects, then per
--     subject: tokens/min (0: none), slot taken (1 or 0), spend (0: no
--     budget), reserved spend, budget keys' lifetime (s), rebuild (1: a
--     missing spend is left for the store's rows, 0: started here);
--     KEYS: record, then per subject: tokens TAT, in-flight set, budget
--     spent, budget held
-- Returns, per admission in order, {verdict, subject (1-based), wait µs,
--   requests limit, requests remaining, requests reset µs, tokens limit,
--   tokens remaining, tokens reset µs}; verdict 0 admitted, 1 budget, 2
--   concurrency, 3 requests, 4 tokens, 5 the period's spend is unknown
--   (nothing taken), 6 released already (nothing taken), 7 budget held by
--   requests in flight. A limit of 0: none. A refusal reads the refusing
--   subject's limits before the request; an admission, after it was taken,
--   the tightest of its subjects' (least remaining, then latest reset): the
--   client's `x-ratelimit-*` headers, with no call of their own.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local MINUTE = 60000000
local lease = tonumber(ARGV[1])
local lease_ms = math.ceil(lease / 1000)
-- How long a settled request's record stays: long enough for the copies of
-- its settle or release sent while Redis did not answer, which run right
-- after the first once it does.
local DONE_MS = 120000
local a, k = 2, 0 -- the next op's first ARGV; the KEYS used so far

local function set_tat(key, tat)
  redis.call('SET', key, string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
end

local function cost(tokens, tpm)
  return math.floor(tokens * MINUTE / tpm)
end

-- Every subject is checked before any is charged, so a refusal takes
-- nothing.
local function admit(member, n, reserved)
  local record = KEYS[k + 1]
  k = k + 1
  local subjects = {}
  for i = 1, n do
    local s = {
      keys = {KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5]},
      rpm = tonumber(ARGV[a]), tpm = tonumber(ARGV[a + 1]),
      conc = tonumber(ARGV[a + 2]), budget = tonumber(ARGV[a + 3]),
      rspend = ARGV[a + 4], seed_arg = ARGV[a + 5], seed = tonumber(ARGV[a + 5]),
      ttl = tonumber(ARGV[a + 6]),
    }
    k, a = k + 5, a + 7
    subjects[i] = s
  end
  if redis.call('GET', record) == 'x' then
    return {6, 0, 0, 0, 0, 0, 0, 0, 0}
  end
  for _, s in ipairs(subjects) do
    s.r_tat = math.max(tonumber(redis.call('GET', s.keys[1]) or '0'), now)
    s.r_remaining, s.r_reset = 0, 0
    if s.rpm > 0 then
      s.interval = math.ceil(MINUTE / s.rpm)
      s.r_remaining = math.floor(math.max(now + s.rpm * s.interval - s.r_tat, 0) / s.interval)
      s.r_reset = s.r_tat - now
    end
    s.t_used = math.max(tonumber(redis.call('GET', s.keys[2]) or '0') - now, 0)
    s.t_remaining, s.t_reset = 0, s.t_used
    if s.tpm > 0 then
      s.t_remaining = math.floor(math.max(MINUTE - s.t_used, 0) * s.tpm / MINUTE)
    end
  end

  for i, s in ipairs(subjects) do
    local function refuse(verdict, wait)
      return {verdict, i, wait, s.rpm, s.r_remaining, s.r_reset, s.tpm, s.t_remaining, s.t_reset}
    end
    if s.budget > 0 then
      local spent = redis.call('GET', s.keys[4])
      if not spent then
        -- Lost (a restart, an eviction) or a new period.
        if s.seed == -2 then
          return refuse(5, -1)
        elseif s.seed >= 0 then
          redis.call('SET', s.keys[4], s.seed_arg, 'EX', s.ttl)
        end
        spent = math.max(s.seed, 0)
      end
      spent = tonumber(spent)
      if spent >= s.budget then
        return refuse(1, -1)
      end
      if spent + tonumber(redis.call('GET', s.keys[5]) or '0') >= s.budget then
        return refuse(7, 1000000)
      end
    end
    if s.conc > 0 then
      redis.call('ZREMRANGEBYSCORE', s.keys[3], '-inf', now)
      if redis.call('ZCARD', s.keys[3]) >= s.conc then
        return refuse(2, 1000000)
      end
    end
    if s.rpm > 0 then
      local tolerance = (s.rpm - 1) * s.interval
      if s.r_tat - now > tolerance then
        return refuse(3, s.r_tat - now - tolerance)
      end
    end
    if s.tpm > 0 and s.t_remaining == 0 then
      return refuse(4, math.max(s.t_used + math.ceil(MINUTE / s.tpm) - MINUTE, 1))
    end
  end

  local settled = false -- whether the request's end has anything to settle
  local rl, rr, rs, tl, tr, ts = 0, 0, 0, 0, 0, 0 -- the tightest readings
  local function tighter(remaining, reset, was_limit, was_remaining, was_reset)
    return was_limit == 0 or remaining < was_remaining
      or (remaining == was_remaining and reset > was_reset)
  end
  for _, s in ipairs(subjects) do
    settled = settled or s.conc > 0 or s.tpm > 0 or s.budget > 0
    if s.rpm > 0 then
      local tat = s.r_tat + s.interval
      set_tat(s.keys[1], tat)
      local remaining = math.floor(math.max(now + s.rpm * s.interval - tat, 0) / s.interval)
      if tighter(remaining, tat - now, rl, rr, rs) then
        rl, rr, rs = s.rpm, remaining, tat - now
      end
    end
    if s.conc > 0 then
      redis.call('ZADD', s.keys[3], now + lease, member)
      redis.call('PEXPIRE', s.keys[3], lease_ms)
    end
    if s.tpm > 0 then
      local used = s.t_used
      if reserved > 0 then
        used = used + cost(reserved, s.tpm)
        set_tat(s.keys[2], now + used)
      end
      local remaining = math.floor(math.max(MINUTE - used, 0) * s.tpm / MINUTE)
      if tighter(remaining, used, tl, tr, ts) then
        tl, tr, ts = s.tpm, remaining, used
      end
    end
    if s.budget > 0 and tonumber(s.rspend) > 0 then
      redis.call('INCRBYFLOAT', s.keys[5], s.rspend)
      redis.call('PEXPIRE', s.keys[5], lease_ms)
    end
  end
  if settled then
    redis.call('SET', record, 'h', 'PX', lease_ms)
  end
  return {0, 0, 0, rl, rr, rs, tl, tr, ts}
end

-- A request's end, for each of its subjects: its concurrency slot freed,
-- its reservation replaced by what it used (when its admission holds one:
-- otherwise what it used is charged whole).
local function settle(member, used, reserved, n)
  local record = KEYS[k + 1]
  k = k + 1
  local state = redis.call('GET', record)
  if state == 'x' then
    k, a = k + 4 * n, a + 6 * n
    return
  end
  local held = state == 'h'
  for _ = 1, n do
    local tpm, slot = tonumber(ARGV[a]), ARGV[a + 1]
    local spend, rspend = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local ttl, rebuild = tonumber(ARGV[a + 4]), ARGV[a + 5]
    local tokens, in_flight, spent, holds = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
    if slot == '1' then
      redis.call('ZREM', in_flight, member)
    end
    if tpm > 0 then
      local delta = cost(used, tpm)
      if held then
        delta = delta - cost(reserved, tpm)
      end
      if delta ~= 0 then
        local tat = tonumber(redis.call('GET', tokens) or '0')
        if delta > 0 then
          tat = math.max(tat, now) + delta
        else
          tat = math.max(tat + delta, now)
        end
        set_tat(tokens, tat)
      end
    end
    if held and rspend > 0 then
      local left = tonumber(redis.call('INCRBYFLOAT', holds, -rspend))
      if left < 1e-9 then
        redis.call('DEL', holds)
      end
    end
    if spend > 0 and (rebuild == '0' or redis.call('EXISTS', spent) == 1) then
      redis.call('INCRBYFLOAT', spent, ARGV[a + 2])
      redis.call('EXPIRE', spent, ttl)
    end
    k, a = k + 4, a + 6
  end
  redis.call('SET', record, 'x', 'PX', DONE_MS)
end

local out = {}
while a <= #ARGV do
  local kind, member = ARGV[a], ARGV[a + 1]
  if kind == 'a' then
    local n, reserved = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    a = a + 4
    for _, v in ipairs(admit(member, n, reserved)) do
      out[#out + 1] = v
    end
  else
    local used, reserved, n = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    a = a + 5
    settle(member, used, reserved, n)
  end
end
return out
