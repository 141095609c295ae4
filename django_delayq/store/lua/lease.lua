-- lease.lua: take or renew a lease (a shard's dispatcher lease, the sweep lock).
--
-- KEYS[1]  lease    STRING: the holder's token, with a TTL
-- ARGV[1]  the caller's token (unique per dispatcher process)
-- ARGV[2]  lease time to live in ms
--
-- Returns  1 taken (was free), 2 renewed (already ours), 0 held by another,
--          3 taken over from a key no holder could have written: a value of
--          another type, or a string without a TTL (set by hand, or by a
--          bug). Such a key would never expire, so it would block the shard
--          (or every sweep) for ever; the caller logs the repair.
-- A dispatcher that stops renewing loses the shard when the TTL runs out and
-- another dispatcher takes it; move.lua refuses a caller whose token does not
-- match, which fences a dispatcher that was paused past its lease.

local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
  return 1
end
if kind == 'string' then
  local holder = redis.call('GET', KEYS[1])
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
    return 2
  end
  if redis.call('PTTL', KEYS[1]) ~= -1 then
    return 0
  end
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 3
