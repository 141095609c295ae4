-- limits.lua: admission of the tasks under a concurrency or rate limit, on
-- a queue's limits shard (one slot: every key below shares its hash tag).
--
-- KEYS[1]  due:hi   ZSET of the high band: id -> run_at ms (add.lua writes it)
-- KEYS[2]  due      ZSET of the normal band, likewise
-- KEYS[3]  due:lo   ZSET of the low band, likewise
-- KEYS[4]  ready    STREAM the admitted tasks are delivered by (one stream,
--                   whatever the band: admission already ordered them)
-- KEYS[5]  epoch    STRING, the shard's index marker (see store/epochs.py)
-- KEYS[6]  wake     LIST the dispatcher blocks on (see add.lua)
-- ARGV[1]  the operation: admit, confirm, started, renew, release, restore,
--          usage
-- ARGV[2]  base: the shard's key prefix, hash tag included; the keys of
--          the limits are <base>:<kind>:<limit>
-- ARGV[3]  lease: ms a concurrency slot lives without renewal, once a
--          worker confirmed it (before that, ADMITTED_LEASE: a delivery
--          waits in the stream for a free worker thread)
-- ARGV[4]  the most tasks to admit in this call
-- ARGV[5]  n: how many limit rules follow, then per rule 4 values:
--          class, concurrency (0: none), rate count (0: none), rate period ms
-- then the operation's own arguments (below).
--
-- A task's *group* names every limit it is under, "\30"-separated; a limit
-- is its class ("task:<name>" or "queue"), then "\31" and the key when the
-- limit is counted per key (limit_by). Tasks of one group have the same
-- limits, so the first of a group blocked means all of it is.
--
-- Keys of the limits (<base>:...):
--   wait:<group>     ZSET  the group's due tasks waiting: id -> order, the
--                          priority first (higher first), then the due time
--   turns            LIST  groups with tasks waiting whose limits may have
--                          room: each gets one admission per turn (fairness)
--   gstate           HASH  group -> 't' (in turns) or 'b' (blocked)
--   blocked:<limit>  LIST  groups waiting for this limit to have room, in
--                          the order they found it full
--   timed            ZSET  limit -> ms when it may have room again (a rate
--                          window sliding, a lease expiring)
--   held:<limit>     ZSET  stream entry id -> expiry of its slot's lease
--   starts:<limit>   ZSET  stream entry id -> when it started (rate window):
--                          until the worker says when the function started,
--                          a reservation far ahead, counted in every window
--   admitted         HASH  stream entry id -> the group it was admitted for
--   stats            HASH  admitted|<class>, throttled|<class>,
--                          waited_ms|<class>: counters since the data began
--
-- A rate limit counts a start when the function starts: admission takes a
-- token reserved ahead (RESERVE ms), which the worker sets to the moment
-- the function started (plus MARGIN, for the instant between its clock
-- reading and the call), or removes if the task never started. So no
-- window of the period holds more starts than the limit, as the function
-- sees them (on the clock of Redis' host; other hosts' clocks in sync).
--
-- Nothing here is the truth: the rows are. After a loss, the rebuild
-- restores the slots of the running rows (restore) before any admission.

local op = ARGV[1]
local base = ARGV[2]
local lease = tonumber(ARGV[3])
local max_admit = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[2]) % 1000

-- After Redis lost the shard's data, nothing is admitted until the rebuild
-- took the running rows' slots again and set the marker back (see
-- reconcile/rebuild.py): a slot lost with the data must not be given away.
-- (A marker "repairing:..." is a rebuild under way: not yet.)
local state = redis.call('GET', KEYS[5])
local exists = state ~= false and state ~= nil
local marked = exists and string.sub(state, 1, 8) == 'rebuilt:'

local rules = {}
local a = 6
for _ = 1, tonumber(ARGV[5]) do
  rules[ARGV[a]] = {
    conc = tonumber(ARGV[a + 1]),
    rate = tonumber(ARGV[a + 2]),
    period = tonumber(ARGV[a + 3]),
  }
  a = a + 4
end

local TURNS = base .. ':turns'
local GSTATE = base .. ':gstate'
local TIMED = base .. ':timed'
local ADMITTED = base .. ':admitted'
local STATS = base .. ':stats'
-- The order score: (100 - priority) * ORDER + due ms, exact in a double.
local ORDER = 10000000000000
local RESERVE = 30000
-- An admitted delivery holds its slots this long until a worker confirms
-- it: as long as the workers take to come to it, not as long as one that
-- died would keep them (that one confirmed, and holds them for ``lease``).
local ADMITTED_LEASE = 60000
local MARGIN = 20

local function limits_of(group)
  local out = {}
  for limit in string.gmatch(group, '[^\30]+') do
    out[#out + 1] = limit
  end
  return out
end

local function class_of(limit)
  local k = string.find(limit, '\31', 1, true)
  return k and string.sub(limit, 1, k - 1) or limit
end

-- Room left under a limit, and when there may be room if there is none
-- (nil: only a release frees it).
local function room(limit)
  local rule = rules[class_of(limit)]
  if rule == nil then
    return 1000000000, nil
  end
  local free, when = 1000000000, nil
  if rule.conc > 0 then
    local held = base .. ':held:' .. limit
    -- A lease that lapsed (its worker died, froze or lost Redis) frees
    -- its slot; its delivery is refused at confirm.
    local lapsed = redis.call('ZRANGEBYSCORE', held, '-inf', now)
    for i = 1, #lapsed do
      redis.call('ZREM', held, lapsed[i])
      redis.call('HDEL', ADMITTED, lapsed[i])
    end
    local n = redis.call('ZCARD', held)
    free = rule.conc - n
    if free <= 0 and n > 0 then
      local first = redis.call('ZRANGE', held, 0, 0, 'WITHSCORES')
      when = tonumber(first[2]) + 1
    end
  end
  if rule.rate > 0 then
    local starts = base .. ':starts:' .. limit
    redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - rule.period)
    local n = redis.call('ZCARD', starts)
    local rate_free = rule.rate - n
    if rate_free <= 0 then
      -- Room comes when the start that makes the window full leaves it.
      local e = redis.call('ZRANGE', starts, n - rule.rate, n - rule.rate, 'WITHSCORES')
      local slides = tonumber(e[2]) + rule.period
      if free > 0 or when == nil or slides > when then
        when = slides
      end
    end
    if rate_free < free then
      free = rate_free
    end
  end
  return free, when
end

local opened = {}
local function unblock(limit, n)
  local key = base .. ':blocked:' .. limit
  for _ = 1, n do
    local group = redis.call('LPOP', key)
    if not group then
      break
    end
    redis.call('RPUSH', TURNS, group)
    redis.call('HSET', GSTATE, group, 't')
  end
  opened[limit] = true
end

local function block(group, limit, when)
  redis.call('RPUSH', base .. ':blocked:' .. limit, group)
  redis.call('HSET', GSTATE, group, 'b')
  if when ~= nil then
    redis.call('ZADD', TIMED, 'LT', when, limit)
  end
end

local function count(field, class, amount)
  redis.call('HINCRBY', STATS, field .. '|' .. class, amount)
end

local admitted = 0
local admitted_ids = {}
local function admit(group, limits, id, order)
  redis.call('ZREM', base .. ':wait:' .. group, id)
  local entry = redis.call('XADD', KEYS[4], '*', 'id', id)
  redis.call('HSET', ADMITTED, entry, group)
  local waited = now - math.fmod(order, ORDER)
  if waited < 0 then
    waited = 0
  end
  local seen = {}
  for i = 1, #limits do
    local limit = limits[i]
    local class = class_of(limit)
    local rule = rules[class]
    if rule ~= nil then
      if rule.conc > 0 then
        redis.call('ZADD', base .. ':held:' .. limit, now + ADMITTED_LEASE, entry)
      end
      if rule.rate > 0 then
        redis.call('ZADD', base .. ':starts:' .. limit, now + RESERVE, entry)
      end
    end
    if not seen[class] then
      seen[class] = true
      count('admitted', class, 1)
      count('waited_ms', class, waited)
    end
  end
  admitted = admitted + 1
  admitted_ids[id] = true
end

-- Each group in turn gets one admission, until none has room or the call
-- admitted its most.
local function take_turns()
  while admitted < max_admit do
    local n = redis.call('LLEN', TURNS)
    if n == 0 then
      return
    end
    for _ = 1, n do
      if admitted >= max_admit then
        return
      end
      local group = redis.call('LPOP', TURNS)
      local wait = base .. ':wait:' .. group
      local head = redis.call('ZRANGE', wait, 0, 0, 'WITHSCORES')
      if #head == 0 then
        redis.call('HDEL', GSTATE, group)
      else
        local limits = limits_of(group)
        local blocked = false
        for i = 1, #limits do
          local free, when = room(limits[i])
          if free <= 0 then
            block(group, limits[i], when)
            blocked = true
            break
          end
        end
        if not blocked then
          admit(group, limits, head[1], tonumber(head[2]))
          if redis.call('ZCARD', wait) > 0 then
            redis.call('RPUSH', TURNS, group)
          else
            redis.call('HDEL', GSTATE, group)
          end
        end
      end
    end
  end
end

-- Groups waiting for a limit that has room again get their turns; a group
-- that then finds another of its limits full goes to wait for that one,
-- so the limit opened may still have room for the next group: asked again.
local function settle()
  if not marked then
    return
  end
  for _ = 1, 16 do
    take_turns()
    local again = false
    local limits = opened
    opened = {}
    for limit in pairs(limits) do
      local free, when = room(limit)
      local key = base .. ':blocked:' .. limit
      if free > 0 and redis.call('LLEN', key) > 0 then
        unblock(limit, free)
        again = true
      elseif when ~= nil and redis.call('LLEN', key) > 0 then
        redis.call('ZADD', TIMED, 'LT', when, limit)
      end
    end
    if not again or admitted >= max_admit then
      return
    end
  end
end

-- Limits whose time came: their waiting groups get turns again.
local function wake_timed()
  if not marked then
    return
  end
  local due = redis.call('ZRANGEBYSCORE', TIMED, '-inf', now)
  for i = 1, #due do
    redis.call('ZREM', TIMED, due[i])
    local free, when = room(due[i])
    if free > 0 then
      unblock(due[i], free)
    elseif when ~= nil and redis.call('LLEN', base .. ':blocked:' .. due[i]) > 0 then
      redis.call('ZADD', TIMED, 'LT', when, due[i])
    end
  end
end

local function place(id, group, order)
  local wait = base .. ':wait:' .. group
  redis.call('ZADD', wait, order, id)
  if not redis.call('HGET', GSTATE, group) then
    redis.call('RPUSH', TURNS, group)
    redis.call('HSET', GSTATE, group, 't')
  end
end

local function remove_due(id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end

local function head_of_due()
  local head = -1
  for b = 1, 3 do
    local first = redis.call('ZRANGE', KEYS[b], 0, 0, 'WITHSCORES')
    if first[2] ~= nil and (head < 0 or tonumber(first[2]) < head) then
      head = tonumber(first[2])
    end
  end
  return head
end

-- A start the worker reports: the entry's rate tokens say when it was
-- (started >= 0), or go if it never started and still reserve (-1).
local function started_at(limits, entry, started)
  for i = 1, #limits do
    local rule = rules[class_of(limits[i])]
    if rule ~= nil and rule.rate > 0 then
      local key = base .. ':starts:' .. limits[i]
      if started >= 0 then
        redis.call('ZADD', key, 'XX', started + MARGIN, entry)
      else
        local score = redis.call('ZSCORE', key, entry)
        if score and tonumber(score) > now + MARGIN then
          redis.call('ZREM', key, entry)
        end
      end
      opened[limits[i]] = true
    end
  end
end

local function release_entry(entry, started)
  local group = redis.call('HGET', ADMITTED, entry)
  if not group then
    return
  end
  redis.call('HDEL', ADMITTED, entry)
  local limits = limits_of(group)
  started_at(limits, entry, started)
  for i = 1, #limits do
    local rule = rules[class_of(limits[i])]
    if redis.call('ZREM', base .. ':held:' .. limits[i], entry) > 0 and rule ~= nil then
      opened[limits[i]] = true
    end
  end
end

-- Wake the dispatcher if a limit's timer now comes before the one it
-- sleeps for (what it read last: ``before``).
local function timed_head()
  local first = redis.call('ZRANGE', TIMED, 0, 0, 'WITHSCORES')
  return first[2] ~= nil and tonumber(first[2]) or nil
end
local function wake_if_sooner(before)
  local after = timed_head()
  if after ~= nil and (before == nil or after < before) then
    redis.call('LPUSH', KEYS[6], '1')
    redis.call('LTRIM', KEYS[6], 0, 0)
  end
end

if op == 'admit' then
  -- ARGV: n placed, then (id, group, order) each; n dropped, then ids.
  if not marked then
    -- Nothing moves until the rebuild: the caller rebuilds (the marker is
    -- gone) or waits for another's (it says "repairing"), then calls again.
    return {0, now + 200, now, now_us, exists and 1 or 0, 0}
  end
  local n = tonumber(ARGV[a])
  a = a + 1
  local placed = {}
  for _ = 1, n do
    remove_due(ARGV[a])
    place(ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]))
    placed[#placed + 1] = {ARGV[a], ARGV[a + 1]}
    a = a + 3
  end
  n = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, n do
    remove_due(ARGV[a])
    a = a + 1
  end
  wake_timed()
  settle()
  -- Those placed and not admitted at once wait for a limit: throttled.
  local throttled = {}
  for i = 1, #placed do
    if not admitted_ids[placed[i][1]] then
      throttled[#throttled + 1] = placed[i][1]
      local limits = limits_of(placed[i][2])
      local seen = {}
      for j = 1, #limits do
        local class = class_of(limits[j])
        if not seen[class] then
          seen[class] = true
          count('throttled', class, 1)
        end
      end
    end
  end
  -- The due ids to describe next: the caller reads their rows.
  local due = {}
  local left = max_admit
  for b = 1, 3 do
    if left > 0 then
      local ids = redis.call('ZRANGEBYSCORE', KEYS[b], '-inf', now, 'LIMIT', 0, left)
      for i = 1, #ids do
        due[#due + 1] = ids[i]
      end
      left = left - #ids
    end
  end
  local head = head_of_due()
  local timed = redis.call('ZRANGE', TIMED, 0, 0, 'WITHSCORES')
  if timed[2] ~= nil and (head < 0 or tonumber(timed[2]) < head) then
    head = tonumber(timed[2])
  end
  local reply = {admitted, head, now, now_us, 1, #throttled}
  for i = 1, #throttled do
    reply[#reply + 1] = throttled[i]
  end
  for i = 1, #due do
    reply[#reply + 1] = due[i]
  end
  return reply
end

if op == 'release' then
  -- ARGV: (entry id, started ms or -1) of deliveries whose attempt ended,
  -- or that never started.
  local before = timed_head()
  for i = a, #ARGV, 2 do
    release_entry(ARGV[i], tonumber(ARGV[i + 1]))
  end
  settle()
  wake_if_sooner(before)
  return admitted
end

if op == 'started' then
  -- ARGV: (entry id, started ms) of functions that started.
  local before = timed_head()
  for i = a, #ARGV, 2 do
    local group = redis.call('HGET', ADMITTED, ARGV[i])
    if group then
      started_at(limits_of(group), ARGV[i], tonumber(ARGV[i + 1]))
    end
  end
  settle()
  wake_if_sooner(before)
  return admitted
end

if op == 'confirm' then
  local requeued = 0
  -- ARGV: (entry, id) pairs a worker is about to claim. An entry whose
  -- slots are still held starts (its slots now on the worker's lease);
  -- one whose slot or token lapsed (and may have gone to another) goes
  -- back to wait for admission: 1 or 0 for each.
  local reply = {}
  for i = a, #ARGV, 2 do
    local entry, id = ARGV[i], ARGV[i + 1]
    local group = redis.call('HGET', ADMITTED, entry)
    local holds = marked and group ~= false and group ~= nil
    local limits = holds and limits_of(group) or {}
    for j = 1, #limits do
      local rule = rules[class_of(limits[j])]
      if rule ~= nil and rule.conc > 0 then
        local held = redis.call('ZSCORE', base .. ':held:' .. limits[j], entry)
        if not held then
          holds = false
        end
      end
      if rule ~= nil and rule.rate > 0 then
        local token = redis.call('ZSCORE', base .. ':starts:' .. limits[j], entry)
        if not token then
          holds = false
        end
      end
    end
    if holds then
      for j = 1, #limits do
        local rule = rules[class_of(limits[j])]
        if rule ~= nil and rule.conc > 0 then
          redis.call('ZADD', base .. ':held:' .. limits[j], now + lease, entry)
        end
      end
      reply[#reply + 1] = 1
    else
      if group then
        release_entry(entry, -1)
      end
      redis.call('ZADD', KEYS[2], now, id)
      requeued = requeued + 1
      reply[#reply + 1] = 0
    end
  end
  -- What the deliveries sent back freed, and no more, is admitted now.
  max_admit = math.min(max_admit, requeued)
  settle()
  if requeued > 0 then
    -- Back in the due-set, due now: the dispatcher places it again.
    redis.call('LPUSH', KEYS[6], '1')
    redis.call('LTRIM', KEYS[6], 0, 0)
  end
  return reply
end

if op == 'renew' then
  -- ARGV: entries a worker still holds: their slots' leases renewed, a
  -- slot already lapsed is not taken back (another task may hold it now).
  local renewed = 0
  for i = a, #ARGV do
    local group = redis.call('HGET', ADMITTED, ARGV[i])
    if group then
      local limits = limits_of(group)
      for j = 1, #limits do
        local rule = rules[class_of(limits[j])]
        if rule ~= nil and rule.conc > 0 then
          renewed = renewed
            + redis.call('ZADD', base .. ':held:' .. limits[j], 'XX', 'CH', now + lease, ARGV[i])
        end
      end
    end
  end
  return renewed
end

if op == 'restore' then
  -- ARGV: (entry, group, started ms, running 1 or 0) of the rows that
  -- run, and of those that started within a rate's period and ended,
  -- after a loss: slots for the first, starts in the windows for both.
  for i = a, #ARGV, 4 do
    local entry, group = ARGV[i], ARGV[i + 1]
    local running = ARGV[i + 3] == '1'
    if running then
      redis.call('HSET', ADMITTED, entry, group)
    end
    local limits = limits_of(group)
    for j = 1, #limits do
      local rule = rules[class_of(limits[j])]
      if running and rule ~= nil and rule.conc > 0 then
        redis.call('ZADD', base .. ':held:' .. limits[j], 'NX', now + lease, entry)
      end
      if rule ~= nil and rule.rate > 0 then
        redis.call('ZADD', base .. ':starts:' .. limits[j], 'NX', tonumber(ARGV[i + 2]) + MARGIN, entry)
      end
    end
  end
  return 1
end

if op == 'usage' then
  -- Per limit class: running (slots held), waiting (tasks due and not
  -- admitted), keys waiting, and the counters. At most ARGV's first
  -- operation argument groups are looked at.
  local most = tonumber(ARGV[a])
  local by = {}
  local function entry_of(class)
    if by[class] == nil then
      by[class] = {0, 0, 0}
    end
    return by[class]
  end
  local admitted_now = redis.call('HVALS', ADMITTED)
  for i = 1, #admitted_now do
    local seen = {}
    local limits = limits_of(admitted_now[i])
    for j = 1, #limits do
      local class = class_of(limits[j])
      if not seen[class] then
        seen[class] = true
        local e = entry_of(class)
        e[1] = e[1] + 1
      end
    end
  end
  local groups = redis.call('HKEYS', GSTATE)
  for i = 1, math.min(#groups, most) do
    local waiting = redis.call('ZCARD', base .. ':wait:' .. groups[i])
    local seen = {}
    local limits = limits_of(groups[i])
    for j = 1, #limits do
      local class = class_of(limits[j])
      if not seen[class] then
        seen[class] = true
        local e = entry_of(class)
        e[2] = e[2] + waiting
        if waiting > 0 and string.find(limits[j], '\31', 1, true) then
          e[3] = e[3] + 1
        end
      end
    end
  end
  local reply = {#groups}
  for class, e in pairs(by) do
    reply[#reply + 1] = class
    reply[#reply + 1] = e[1]
    reply[#reply + 1] = e[2]
    reply[#reply + 1] = e[3]
  end
  local stats = redis.call('HGETALL', STATS)
  reply[#reply + 1] = '--'
  for i = 1, #stats do
    reply[#reply + 1] = stats[i]
  end
  return reply
end

return redis.error_reply('limits.lua: unknown operation ' .. tostring(op))
