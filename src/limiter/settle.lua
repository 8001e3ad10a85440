-- toolgate's settling of one request when its answer ended: its
-- concurrency slot freed, its tokens charged to the minute and its spend
-- to the budget (src/limiter/gcra.rs holds the same arithmetic).
-- KEYS: 1 tokens TAT, 2 in-flight set, 3 budget spent
-- ARGV: 1 tokens/min (0: none), 2 tokens, 3 member ('' when not counted),
--       4 spend (0: no budget), 5 budget key's lifetime (s)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local MINUTE = 60000000
local tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2])
if ARGV[3] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[3])
end
if tpm > 0 and tokens > 0 then
  local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
  tat = tat + math.floor(tokens * MINUTE / tpm)
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
end
local spend = tonumber(ARGV[4])
if spend > 0 then
  redis.call('INCRBYFLOAT', KEYS[3], ARGV[4])
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[5]))
end
return 0
