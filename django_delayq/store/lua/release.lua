-- release.lua: give a lease back, if the caller still holds it.
--
-- KEYS[1]  lease    STRING: the holder's token
-- ARGV[1]  the caller's token
--
-- Returns  1 released, 0 not held by the caller (expired or taken over, or
--          the key is not a lease at all: lease.lua repairs that one).

if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
