-- paused.lua: the mirror of the paused queues (the PausedQueue rows).
--
-- KEYS[1]  paused   HASH queue name -> paused_at in epoch ms, and two fields
--                   no queue name can be (a name has no "~"):
--                   "~known"    present only once the hash was written
--                               whole from the rows: without it the hash
--                               says nothing (Redis lost it, or it was
--                               never written), and readers ask the rows
--                   "~version"  bumped by every write
-- ARGV[1]  "pause": ARGV[2] queue, ARGV[3] paused_at ms
--          "resume": ARGV[2] queue
--          "mirror": ARGV[2] the version the caller read before it read the
--                   rows ("" when there was none), then queue, paused_at ms,
--                   queue, paused_at ms, ...
--
-- Returns  pause, resume: the new version. mirror: 1 if the hash was
--          replaced, 0 if a pause or resume wrote it since the caller read
--          the version (its rows may miss that change: read again).
--
-- A pause or resume bumps the version even on a hash Redis lost: the hash
-- it leaves has no "~known", so it is still read as unknown, and a mirror
-- built from rows read before that change cannot overwrite it.

local op = ARGV[1]
if op == 'pause' or op == 'resume' then
  local version = redis.call('HINCRBY', KEYS[1], '~version', 1)
  if op == 'pause' then
    redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  else
    redis.call('HDEL', KEYS[1], ARGV[2])
  end
  return version
end

-- mirror
local current = redis.call('HGET', KEYS[1], '~version')
if (current or '') ~= ARGV[2] then
  return 0
end
local version = (tonumber(ARGV[2]) or 0) + 1
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '~known', '1', '~version', version)
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 1
