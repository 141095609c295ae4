-- lease.lua: take or renew a shard's dispatcher lease.
--
-- KEYS[1]  lease    STRING: the holder's token, with a TTL
-- ARGV[1]  the caller's token (unique per dispatcher process)
-- ARGV[2]  lease time to live in ms
--
-- Returns  1 taken (was free), 2 renewed (already ours), 0 held by another.
-- A dispatcher that stops renewing loses the shard when the TTL runs out and
-- another dispatcher takes it; move.lua refuses a caller whose token does not
-- match, which fences a dispatcher that was paused past its lease.

local holder = redis.call('GET', KEYS[1])
if holder == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return 2
end
return 0
