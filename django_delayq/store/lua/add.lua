-- add.lua: index tasks in one shard's due-sets and wake the shard's
-- dispatcher when one of them became the shard's earliest task.
--
-- KEYS[1]  due:hi   ZSET of the high band, member = 16-byte task id,
--                   score = run_at in epoch ms
-- KEYS[2]  due      ZSET of the normal band, likewise
-- KEYS[3]  due:lo   ZSET of the low band, likewise
-- KEYS[4]  wake     LIST the dispatcher blocks on; kept at one element
-- ARGV     band1, score1, member1, band2, score2, member2, ...
--          (band: 1 high, 2 normal, 3 low: the index of its due-set in
--          KEYS; at most 1000 triples)
--
-- Returns  1 if the dispatcher was woken, 0 otherwise.
--
-- ZADD without NX/XX on purpose: adding a task that is already indexed only
-- moves it to its (new) due time, so replays and reschedules are idempotent.

local earliest = math.huge
local bands = {{}, {}, {}}
for i = 1, #ARGV, 3 do
  local score = tonumber(ARGV[i + 1])
  if score < earliest then
    earliest = score
  end
  local list = bands[tonumber(ARGV[i])]
  list[#list + 1] = ARGV[i + 1]
  list[#list + 1] = ARGV[i + 2]
end

-- The shard's earliest task, over every band: what the dispatcher waits for.
local head = math.huge
for b = 1, 3 do
  if #bands[b] > 0 then
    redis.call('ZADD', KEYS[b], unpack(bands[b]))
  end
  local first = redis.call('ZRANGE', KEYS[b], 0, 0, 'WITHSCORES')
  if first[2] ~= nil and tonumber(first[2]) < head then
    head = tonumber(first[2])
  end
end

if head >= earliest then
  redis.call('LPUSH', KEYS[4], '1')
  redis.call('LTRIM', KEYS[4], 0, 0)
  return 1
end
return 0
