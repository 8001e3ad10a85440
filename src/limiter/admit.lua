-- toolgate's admission of one request (src/limiter/gcra.rs holds the same
-- arithmetic and its reasons). Times are microseconds, from Redis's clock,
-- so every replica reads one clock.
-- KEYS: 1 requests TAT, 2 tokens TAT, 3 in-flight set, 4 budget spent
-- ARGV: 1 requests/min, 2 tokens/min, 3 concurrent, 4 budget (0: none of it),
--       5 member (this request), 6 lease (µs)
-- Returns {verdict, wait µs, requests remaining, requests reset µs,
--          tokens remaining, tokens reset µs}; verdict 0 admitted,
--          1 budget, 2 concurrency, 3 requests, 4 tokens.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local MINUTE = 60000000
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local conc, budget = tonumber(ARGV[3]), tonumber(ARGV[4])

local r_tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local r_remaining, r_reset, r_new = 0, 0, 0
if rpm > 0 then
  local interval = math.ceil(MINUTE / rpm)
  r_remaining = math.floor(math.max(now + rpm * interval - r_tat, 0) / interval)
  r_reset = r_tat - now
end
local t_used = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') - now, 0)
local t_remaining, t_reset = 0, t_used
if tpm > 0 then
  t_remaining = math.floor(math.max(MINUTE - t_used, 0) * tpm / MINUTE)
end
local function refuse(verdict, wait)
  return {verdict, wait, r_remaining, r_reset, t_remaining, t_reset}
end

if budget > 0 then
  local spent = tonumber(redis.call('GET', KEYS[4]) or '0')
  if spent >= budget then
    return refuse(1, -1)
  end
end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then
    return refuse(2, 1000000)
  end
end
if rpm > 0 then
  local interval = math.ceil(MINUTE / rpm)
  local tolerance = (rpm - 1) * interval
  if r_tat - now > tolerance then
    return refuse(3, r_tat - now - tolerance)
  end
end
if tpm > 0 then
  if t_remaining == 0 then
    return refuse(4, math.max(t_used + math.ceil(MINUTE / tpm) - MINUTE, 1))
  end
end

if rpm > 0 then
  local interval = math.ceil(MINUTE / rpm)
  r_new = r_tat + interval
  redis.call('SET', KEYS[1], string.format('%.0f', r_new), 'PX', math.ceil((r_new - now) / 1000) + 1000)
  r_remaining = math.floor(math.max(now + rpm * interval - r_new, 0) / interval)
  r_reset = r_new - now
end
if conc > 0 then
  local lease = tonumber(ARGV[6])
  redis.call('ZADD', KEYS[3], now + lease, ARGV[5])
  redis.call('PEXPIRE', KEYS[3], math.ceil(lease / 1000))
end
return {0, 0, r_remaining, r_reset, t_remaining, t_reset}
