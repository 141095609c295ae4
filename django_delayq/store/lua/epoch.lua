-- epoch.lua: claim the rebuild of one shard's index after Redis lost data,
-- or mark it done. The marker is how a loss is seen: it is written only
-- here, so a Redis that comes back without it (a FLUSHALL, a restart
-- without persistence) lost everything the shard had since.
--
-- KEYS[1]  epoch  STRING "<state>:<ms>:<token>": state "repairing" (a claim,
--                 with a TTL: a repairer that dies lets the marker go, and
--                 the loss is seen again) or "rebuilt" (no TTL); ms is
--                 Redis' clock when it was written; token names the process
-- ARGV[1]  'claim'  take the rebuild if the marker is missing;
--          'force'  also if it was written more than ARGV[4] ms ago (the
--                   caller knows the server restarted or was promoted, so
--                   a marker it holds may be older than the loss);
--          'done'   mark the rebuild done, if the caller's claim still holds
-- ARGV[2]  the caller's token
-- ARGV[3]  claim and force: the claim's time to live in ms
-- ARGV[4]  force: a marker younger than this (ms) was written since the
--          restart by another process that saw it too: it stands
--
-- Returns  1 claimed (the caller rebuilds) or marked done; 0 otherwise.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[1]
local token = ARGV[2]

local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'string' and kind ~= 'none' then
  -- Not a marker (set by hand?): as good as none.
  redis.call('DEL', KEYS[1])
end
local value = redis.call('GET', KEYS[1])

if mode == 'done' then
  local suffix = ':' .. token
  if value and string.sub(value, 1, 10) == 'repairing:'
      and string.sub(value, -#suffix) == suffix then
    redis.call('SET', KEYS[1], 'rebuilt:' .. now .. suffix)
    return 1
  end
  return 0
end

if value then
  if mode ~= 'force' then
    return 0
  end
  local written = tonumber(string.match(value, '^%a+:(%d+):'))
  if written and now - written < tonumber(ARGV[4]) then
    return 0
  end
end
redis.call('SET', KEYS[1], 'repairing:' .. now .. ':' .. token, 'PX', tonumber(ARGV[3]))
return 1
