-- toolgate's limiter work for one tenant, as one atomic step on Redis's
-- clock: the ends (settles) and admissions of that tenant's requests that
-- queued on this replica while its previous batch was in Redis, in the
-- order they came (src/limiter/gcra.rs holds the same arithmetic and its
-- reasons). Times are microseconds. A request counts against one or more
-- subjects (its tenant, a managed key's own share), all under the
-- tenant's hash tag.
--
-- ARGV: 1 lease (µs), then each op in turn:
--   admission: 'a', member, subjects, then per subject: requests/min,
--     tokens/min, concurrent, budget (0: none);
--     KEYS per subject: requests TAT, tokens TAT, in-flight set, budget spent
--   settle: 's', member, tokens, subjects, then per subject: tokens/min (0:
--     none), slot taken (1 or 0), spend (0: no budget), budget key's
--     lifetime (s);
--     KEYS per subject: tokens TAT, in-flight set, budget spent
-- Returns, per admission in order, {verdict, subject (1-based), wait µs,
--   requests remaining, requests reset µs, tokens remaining, tokens reset
--   µs}; verdict 0 admitted, 1 budget, 2 concurrency, 3 requests, 4 tokens.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local MINUTE = 60000000
local lease = tonumber(ARGV[1])
local a, k = 2, 0 -- the next op's first ARGV; the KEYS used so far

-- Every subject is checked before any is charged, so a refusal takes
-- nothing.
local function admit(member, n)
  local subjects = {}
  for i = 1, n do
    local s = {
      keys = {KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]},
      rpm = tonumber(ARGV[a]), tpm = tonumber(ARGV[a + 1]),
      conc = tonumber(ARGV[a + 2]), budget = tonumber(ARGV[a + 3]),
    }
    k, a = k + 4, a + 4
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
    subjects[i] = s
  end

  for i, s in ipairs(subjects) do
    local function refuse(verdict, wait)
      return {verdict, i, wait, s.r_remaining, s.r_reset, s.t_remaining, s.t_reset}
    end
    if s.budget > 0 then
      local spent = tonumber(redis.call('GET', s.keys[4]) or '0')
      if spent >= s.budget then
        return refuse(1, -1)
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

  for _, s in ipairs(subjects) do
    if s.rpm > 0 then
      local new = s.r_tat + s.interval
      redis.call('SET', s.keys[1], string.format('%.0f', new), 'PX', math.ceil((new - now) / 1000) + 1000)
    end
    if s.conc > 0 then
      redis.call('ZADD', s.keys[3], now + lease, member)
      redis.call('PEXPIRE', s.keys[3], math.ceil(lease / 1000))
    end
  end
  return {0, 0, 0, 0, 0, 0, 0}
end

-- A request's end, for each of its subjects: its concurrency slot freed,
-- its tokens charged to the minute and its spend to the budget.
local function settle(member, tokens, n)
  for _ = 1, n do
    local tpm, slot = tonumber(ARGV[a]), ARGV[a + 1]
    local spend, ttl = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    if slot == '1' then
      redis.call('ZREM', KEYS[k + 2], member)
    end
    if tpm > 0 and tokens > 0 then
      local tat = math.max(tonumber(redis.call('GET', KEYS[k + 1]) or '0'), now)
      tat = tat + math.floor(tokens * MINUTE / tpm)
      redis.call('SET', KEYS[k + 1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
    end
    if spend > 0 then
      redis.call('INCRBYFLOAT', KEYS[k + 3], ARGV[a + 2])
      redis.call('EXPIRE', KEYS[k + 3], ttl)
    end
    k, a = k + 3, a + 4
  end
end

local out = {}
while a <= #ARGV do
  local kind, member = ARGV[a], ARGV[a + 1]
  if kind == 'a' then
    local n = tonumber(ARGV[a + 2])
    a = a + 3
    for _, v in ipairs(admit(member, n)) do
      out[#out + 1] = v
    end
  else
    local tokens, n = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    a = a + 4
    settle(member, tokens, n)
  end
end
return out
