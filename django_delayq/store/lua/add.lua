-- add.lua: index tasks in one shard's due-set and wake the shard's
-- dispatcher when one of them became the earliest task.
--
-- KEYS[1]  due-set   ZSET, member = 16-byte task id, score = run_at in epoch ms
-- KEYS[2]  wake      LIST the dispatcher blocks on; kept at one element
-- ARGV     score1, member1, score2, member2, ...  (at most 1000 pairs)
--
-- Returns  1 if the dispatcher was woken, 0 otherwise.
--
-- ZADD without NX/XX on purpose: adding a task that is already indexed only
-- moves it to its (new) due time, so replays and reschedules are idempotent.

local earliest = math.huge
for i = 1, #ARGV, 2 do
  local score = tonumber(ARGV[i])
  if score < earliest then
    earliest = score
  end
end

redis.call('ZADD', KEYS[1], unpack(ARGV))

local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] ~= nil and tonumber(head[2]) >= earliest then
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
  return 1
end
return 0
