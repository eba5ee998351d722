#!lua
--[[ host_take: hold a host name for one daemon process, or renew the hold.
KEYS[1]  owner   str  the holding process's value, with a TTL
ARGV[1]  value   str  this process's value (its pid, machine, place and a random nonce),
                       1-4096 bytes
ARGV[2]  ttl_ms  int  how long the hold lasts without another call, 1 ms to 24 h
ARGV[3]  stale   str  a value known to be left by a dead process, taken as if free; '' for none
Returns  {1, value} renewed: the name was held with this value |
         {2, value} taken: the name was free, or held with the stale value |
         {0, holder} held by another process: nothing is written
Errors   -4 bad call (key count, argument count, a field out of shape or bounds); nothing is
         written
]]
-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not string.find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end

if #KEYS ~= 1 or #ARGV ~= 3 then return -4 end
local ttl = int(ARGV[2], 1, 86400000)
if ARGV[1] == '' or #ARGV[1] > 4096 or #ARGV[3] > 4096 or not ttl then return -4 end

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, holder}
end
if holder and (ARGV[3] == '' or holder ~= ARGV[3]) then return {0, holder} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return {2, ARGV[1]}
