-- finish.lua: acknowledge and delete entries of one ready stream, atomically
-- (a connection lost in between must not leave an acknowledged entry behind,
-- which no worker would ever read or reclaim), and count what they did.
--
-- KEYS[1]  ready     STREAM: the shard's ready stream
-- KEYS[2]  activity  HASH: the shard's counters of this minute (optional)
-- ARGV[1]  the consumer group
-- ARGV[2]  n: how many entry ids follow
-- ARGV[3..2+n]  entry ids
-- ARGV[3+n]     (with KEYS[2]) the counters' TTL, in seconds
-- ARGV[4+n..]   (with KEYS[2]) field, amount, field, amount...
--
-- Returns  the number of entries deleted.
--
-- The counters are added only if this call acknowledged something: a call
-- sent again (after NOSCRIPT in a pipeline) finds its entries acknowledged
-- already, and counts nothing twice.

local n = tonumber(ARGV[2])
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 3, 2 + n))
local deleted = redis.call('XDEL', KEYS[1], unpack(ARGV, 3, 2 + n))
if KEYS[2] and acked > 0 then
  for i = 4 + n, #ARGV, 2 do
    redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
  end
  redis.call('EXPIRE', KEYS[2], ARGV[3 + n])
end
return deleted
