-- members.lua: heartbeat of a dispatcher, and how many are alive.
--
-- KEYS[1]  dispatchers  ZSET, member = dispatcher token, score = expiry (epoch ms)
-- ARGV[1]  the caller's token
-- ARGV[2]  heartbeat time to live in ms
--
-- Returns  the number of live dispatchers, the caller included.
-- Dispatchers use the count to take a fair share of the shards.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
