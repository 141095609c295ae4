-- move.lua: move due task ids from a shard's due-sets to its ready streams,
-- each band's to its own.
--
-- KEYS[1]  due:hi    ZSET of the high band, member = 16-byte task id,
--                    score = run_at in epoch ms
-- KEYS[2]  due       ZSET of the normal band, likewise; it may also hold
--                    legacy members, the id and a band byte ('h' or 'l'),
--                    as the release that introduced bands wrote them
-- KEYS[3]  due:lo    ZSET of the low band, likewise
-- KEYS[4]  ready:hi  STREAM of the high band, which the workers read through
--                    a consumer group
-- KEYS[5]  ready     STREAM of the normal band, likewise
-- KEYS[6]  ready:lo  STREAM of the low band, likewise
-- KEYS[7]  lease     STRING holding the token of the dispatcher that owns the shard
-- KEYS[8]  epoch     STRING, the shard's index marker (see store/epochs.py):
--                    missing when Redis lost the shard's keys since its index
--                    was last rebuilt from the rows
-- ARGV[1]  the caller's lease token (the fence: a dispatcher whose lease was
--          taken over moves nothing)
-- ARGV[2]  the most members to take out of the due-sets in this call
--
-- Returns  {moved, head, now, now_us, marked}
--          moved:  ids moved, or -1 when the caller does not hold the lease
--          head:   score of the earliest member left in the due-sets, or -1
--                  if none
--          now:    Redis' clock in epoch ms (one clock for every dispatcher)
--          now_us: the microseconds past ``now``, so that the caller can time
--                  the head's due moment to better than a millisecond
--          marked: 1 if the shard's index marker exists, 0 if it is gone (a
--                  FLUSHALL, a restart without persistence): the caller
--                  rebuilds the index. Looked at before the lease, which the
--                  same loss takes away.
--
-- Due means score <= now by Redis' TIME, so dispatchers on hosts with skewed
-- clocks agree. Pop and push happen in this one script: a crash can never
-- leave an id in neither place. An entry's id field is the bare 16-byte id.
-- The high band's entries are added first, then the normal, then the low:
-- a worker blocked on all of them is served the highest band.
--
-- One entry per task: a task taken to the high or low band leaves every
-- due-set, under each of its members. A bare id in the normal band's
-- due-set that a band's due-set also holds belongs to that band: a sweeper
-- of a release without bands, which looks only at the normal band's keys,
-- indexed it there again as if it were lost.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[2]) % 1000
local marked = redis.call('EXISTS', KEYS[8])

if redis.call('GET', KEYS[7]) ~= ARGV[1] then
  return {-1, -1, now, now_us, marked}
end

-- Commands over a list go by chunks: unpack() of thousands of values
-- would overflow Lua's stack.
local CHUNK = 1000
local function zrem(key, members)
  for i = 1, #members, CHUNK do
    redis.call('ZREM', key, unpack(members, i, math.min(i + CHUNK - 1, #members)))
  end
end
local function zmscore(key, members)
  local scores = {}
  for i = 1, #members, CHUNK do
    local last = math.min(i + CHUNK - 1, #members)
    local page = redis.call('ZMSCORE', key, unpack(members, i, last))
    for j = 1, #page do
      scores[i + j - 1] = page[j]
    end
  end
  return scores
end

local left = tonumber(ARGV[2])
local streams = {{}, {}, {}}
local taken = {}
local function take(band, id)
  if not taken[id] then
    taken[id] = band
    streams[band][#streams[band] + 1] = id
  end
end
local function due(key)
  if left <= 0 then
    return {}
  end
  local members = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, left)
  left = left - #members
  return members
end

local high = due(KEYS[1])
for i = 1, #high do
  take(1, high[i])
end
local normal = due(KEYS[2])
local bare = {}
for i = 1, #normal do
  local member = normal[i]
  local band = string.len(member) == 17 and string.sub(member, 17) or ''
  if band == 'h' then
    take(1, string.sub(member, 1, 16))
  elseif band == 'l' then
    take(3, string.sub(member, 1, 16))
  else
    bare[#bare + 1] = member
  end
end
local low = due(KEYS[3])
for i = 1, #low do
  take(3, low[i])
end
-- Looked up only where a band's due-set has members: a shard without
-- priorities pays nothing for it.
local function bands_of(key)
  if redis.call('EXISTS', key) == 0 then
    return {}
  end
  return zmscore(key, bare)
end
if #bare > 0 then
  local in_high = bands_of(KEYS[1])
  local in_low = bands_of(KEYS[3])
  for i = 1, #bare do
    if in_high[i] then
      take(1, bare[i])
    elseif in_low[i] then
      take(3, bare[i])
    else
      take(2, bare[i])
    end
  end
end

local moved = 0
for band = 1, 3 do
  for i = 1, #streams[band] do
    redis.call('XADD', KEYS[3 + band], '*', 'id', streams[band][i])
  end
  moved = moved + #streams[band]
end

-- What was read goes, and a high or low task's other members with it.
zrem(KEYS[1], high)
zrem(KEYS[2], normal)
zrem(KEYS[3], low)
for band = 1, 3, 2 do
  local ids = streams[band]
  local legacy = {}
  for i = 1, #ids do
    legacy[#legacy + 1] = ids[i]
    legacy[#legacy + 1] = ids[i] .. 'h'
    legacy[#legacy + 1] = ids[i] .. 'l'
  end
  zrem(KEYS[1], ids)
  zrem(KEYS[2], legacy)
  zrem(KEYS[3], ids)
end

local head = -1
for b = 1, 3 do
  local first = redis.call('ZRANGE', KEYS[b], 0, 0, 'WITHSCORES')
  if first[2] ~= nil and (head < 0 or tonumber(first[2]) < head) then
    head = tonumber(first[2])
  end
end
return {moved, head, now, now_us, marked}
