-- members.lua: heartbeat of a dispatcher (or a worker), and how many are alive.
--
-- KEYS[1]  dispatchers  ZSET, member = dispatcher token (or worker name),
--                       score = expiry (epoch ms)
-- ARGV[1]  the caller's token
-- ARGV[2]  heartbeat time to live in ms
-- ARGV[3]  "1" to also delete expired members (callers do it now and then:
--          counting ignores them anyway, so idle dispatchers spend less)
--
-- Returns  the number of live dispatchers, the caller included.
-- Dispatchers use the count to take a fair share of the shards.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if ARGV[3] == '1' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
end
return redis.call('ZCOUNT', KEYS[1], now, '+inf')
