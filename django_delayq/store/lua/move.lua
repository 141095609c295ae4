-- move.lua: move due task ids from a shard's due-set to its ready stream.
--
-- KEYS[1]  due-set  ZSET, member = 16-byte task id, then a band byte for
--                   the high ('h') and low ('l') bands; score = run_at in ms
-- KEYS[2]  ready    STREAM of the normal band, which the workers read through
--                   a consumer group
-- KEYS[3]  lease    STRING holding the token of the dispatcher that owns the shard
-- KEYS[4]  ready:hi STREAM of the high band
-- KEYS[5]  ready:lo STREAM of the low band
-- ARGV[1]  the caller's lease token (the fence: a dispatcher whose lease was
--          taken over moves nothing)
-- ARGV[2]  the most ids to move in this call
--
-- Returns  {moved, head, now, now_us}
--          moved:  ids moved, or -1 when the caller does not hold the lease
--          head:   score of the earliest id left in the due-set, or -1 if none
--          now:    Redis' clock in epoch ms (one clock for every dispatcher)
--          now_us: the microseconds past ``now``, so that the caller can time
--                  the head's due moment to better than a millisecond
--
-- Due means score <= now by Redis' TIME, so dispatchers on hosts with skewed
-- clocks agree. Pop and push happen in this one script: a crash can never
-- leave an id in neither place. An entry's id field is the bare 16-byte id.
-- The high band's entries are added first, then the normal, then the low:
-- a worker blocked on all of them is served the highest band.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[2]) % 1000

if redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return {-1, -1, now, now_us}
end

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local high, low = {}, {}
for i = 1, #ids do
  local band = string.sub(ids[i], 17, 17)
  if band == 'h' then
    high[#high + 1] = string.sub(ids[i], 1, 16)
  elseif band == 'l' then
    low[#low + 1] = string.sub(ids[i], 1, 16)
  end
end
for i = 1, #high do
  redis.call('XADD', KEYS[4], '*', 'id', high[i])
end
for i = 1, #ids do
  if string.len(ids[i]) ~= 17 then
    redis.call('XADD', KEYS[2], '*', 'id', ids[i])
  end
end
for i = 1, #low do
  redis.call('XADD', KEYS[5], '*', 'id', low[i])
end
if #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
end

local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] == nil then
  return {#ids, -1, now, now_us}
end
return {#ids, tonumber(head[2]), now, now_us}
