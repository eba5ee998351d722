#!lua
--[[ host_release: give a host name up, only while this process still holds it.
KEYS[1]  owner  str  the holding process's value, with a TTL
ARGV[1]  value  str  this process's value, 1-4096 bytes
Returns  1 released | 0 held by another process, or by none: nothing is written
Errors   -4 bad call (key count, argument count, an empty or over-long value); nothing is
         written
]]
if #KEYS ~= 1 or #ARGV ~= 1 or ARGV[1] == '' or #ARGV[1] > 4096 then return -4 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
