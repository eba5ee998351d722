#!lua
--[[ host_take: hold a host name for one daemon process, or renew the hold.
KEYS[1]  owner   str  the holding process's value, with a TTL
ARGV[1]  value   str  this process's value (its pid, machine, place and a random nonce)
ARGV[2]  ttl_ms  int  how long the hold lasts without another call
ARGV[3]  stale   str  a value known to be left by a dead process, taken as if free; '' for none
Returns  {1, value} renewed: the name was held with this value |
         {2, value} taken: the name was free, or held with the stale value |
         {0, holder} held by another process: nothing is written
Errors   -4 bad input; nothing is written
]]
if #ARGV ~= 3 then return -4 end
local ttl = tonumber(ARGV[2])
-- ttl % 1 ~= 0 also rejects nan and inf, which pass plain comparisons
if ARGV[1] == '' or not ttl or ttl % 1 ~= 0 or ttl < 1 then return -4 end

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, holder}
end
if holder and (ARGV[3] == '' or holder ~= ARGV[3]) then return {0, holder} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return {2, ARGV[1]}
