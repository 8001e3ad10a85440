-- toolgate's settling of one request when its answer ended, for each of
-- its subjects: its concurrency slot freed, its tokens charged to the
-- minute and its spend to the budget (src/limiter/gcra.rs holds the same
-- arithmetic).
-- KEYS, per subject: tokens TAT, in-flight set, budget spent
-- ARGV: 1 member, 2 tokens, 3 subjects, then per subject: tokens/min (0:
--       none), slot taken (1 or 0), spend (0: no budget), budget key's
--       lifetime (s)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local MINUTE = 60000000
local member, tokens, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 1, n do
  local k, a = (i - 1) * 3, 3 + (i - 1) * 4
  local tpm, slot = tonumber(ARGV[a + 1]), ARGV[a + 2]
  local spend, ttl = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  if slot == '1' then
    redis.call('ZREM', KEYS[k + 2], member)
  end
  if tpm > 0 and tokens > 0 then
    local tat = math.max(tonumber(redis.call('GET', KEYS[k + 1]) or '0'), now)
    tat = tat + math.floor(tokens * MINUTE / tpm)
    redis.call('SET', KEYS[k + 1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
  end
  if spend > 0 then
    redis.call('INCRBYFLOAT', KEYS[k + 3], ARGV[a + 3])
    redis.call('EXPIRE', KEYS[k + 3], ttl)
  end
end
return 0
