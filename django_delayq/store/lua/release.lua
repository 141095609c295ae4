-- release.lua: give a shard's lease back, if the caller still holds it.
--
-- KEYS[1]  lease    STRING: the holder's token
-- ARGV[1]  the caller's token
--
-- Returns  1 released, 0 not held by the caller (expired or taken over).

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
