#!lua flags=no-writes
--[[ lease_holders: list the live holders of a fleet lease (read-only, so it may run on a replica).
KEYS[1]  holders  zset    holder id -> expiry (server ms)
ARGV     none
Returns  {now_ms, holder, expiry_ms, holder, expiry_ms, ...}  live holders, soonest expiry first
Errors   -4  bad input: wrong key/arg count
]]

if #KEYS ~= 1 or #ARGV ~= 0 then return -4 end

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- expired entries may linger until the next write; they are not holders, so skip them
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES')
local out = {now_ms}
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = math.floor(tonumber(live[i + 1]))
end
return out
