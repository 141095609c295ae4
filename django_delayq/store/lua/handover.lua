-- handover.lua: a dispatcher that stops gracefully leaves the live set and
-- wakes the other dispatchers of the same queues, which take over the
-- shards it just released at once instead of at their next lease check.
--
-- KEYS[1]  dispatchers  ZSET, member = dispatcher token, score = expiry (epoch ms)
-- KEYS[2]  handover     LIST the live dispatchers block on (BLPOP); in the
--                       same hash slot as KEYS[1]
-- ARGV[1]  the caller's token
-- ARGV[2]  the most pushes the list keeps
-- ARGV[3]  the list's time to live in ms
--
-- Returns  the number of pushes: one per live dispatcher left, plus one for
--          the caller's own listener, which may still be blocked on the list
--          (BLPOP serves the longest-blocked client first).
--
-- Pushes nobody takes expire with the list; a dispatcher that blocks later
-- takes one and looks at the leases once more, which costs nothing.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
local pushes = math.min(redis.call('ZCOUNT', KEYS[1], now, '+inf') + 1, tonumber(ARGV[2]))
for _ = 1, pushes do
  redis.call('LPUSH', KEYS[2], '1')
end
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return pushes
