-- finish.lua: acknowledge and delete entries of one ready stream, atomically
-- (a connection lost in between must not leave an acknowledged entry behind,
-- which no worker would ever read or reclaim).
--
-- KEYS[1]  ready    STREAM: the shard's ready stream
-- ARGV[1]  the consumer group
-- ARGV[2..] entry ids
--
-- Returns  the number of entries deleted.

redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
