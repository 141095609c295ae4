-- read.lua: read new entries of one shard's ready streams for a consumer,
-- highest band first: a lower band is read only for what the higher bands
-- could not fill, so a worker never takes a low band's task while a higher
-- band of the shard has one waiting.
--
-- KEYS     the shard's ready streams, highest band first
-- ARGV[1]  the consumer group
-- ARGV[2]  the consumer
-- ARGV[3]  the most entries to read
--
-- Returns  {{stream, {{entry id, {field, value, ...}}, ...}}, ...}: the reply
--          of XREADGROUP, one element per stream that had entries.
-- Never blocks (a script cannot): a worker that got nothing blocks with a
-- plain XREADGROUP afterwards. A stream that fails (its group lost, a key
-- of another type) ends the read with what the streams before it gave, or
-- with its error if they gave nothing (the caller then repairs it): entries
-- already delivered are never dropped from the reply.

local left = tonumber(ARGV[3])
local out = {}
for i = 1, #KEYS do
  if left <= 0 then
    break
  end
  local reply = redis.pcall(
    'XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', left, 'STREAMS', KEYS[i], '>'
  )
  if type(reply) == 'table' and reply.err then
    if #out == 0 then
      return redis.error_reply(reply.err)
    end
    return out
  end
  if reply then
    out[#out + 1] = reply[1]
    left = left - #reply[1][2]
  end
end
return out
