#!lua
--[[ lease_release: give back a slot of a fleet lease; idempotent.
KEYS[1]  holders  zset    holder id -> expiry (server ms)
ARGV[1]  holder   str     the id the grant was made to
Returns  1   released
         0   not a holder (already released or expired); nothing else is touched
Errors   -4  bad call: wrong key/arg count, holder empty or over 255 bytes; nothing is written
]]

if #KEYS ~= 1 or #ARGV ~= 1 then return -4 end
local holder = ARGV[1]
if holder == '' or #holder > 255 then return -4 end

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- removing by exact member is what makes release safe: another holder's entry is never hit
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
return redis.call('ZREM', KEYS[1], holder)
