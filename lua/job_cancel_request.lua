#!lua
--[[ job_cancel_request: ask the daemon running a job to stop it, if the claim is still current.
KEYS[1]  lock    hash  id -> lock token
KEYS[2]  cancel  hash  id -> cancel request expiry ms
ARGV[1]  id      str   job id
ARGV[2]  token   str   the claim the caller saw running
ARGV[3]  ttl_ms  int   how long the request stands
Returns  1 requested
Errors   -1 the claim is no longer current (finished, stalled or re-claimed); -4 bad input
]]
if #ARGV ~= 3 then return -4 end
local ttl = tonumber(ARGV[3])
-- ttl % 1 ~= 0 also rejects nan and inf, which pass plain comparisons
if ARGV[1] == '' or ARGV[2] == '' or not ttl or ttl % 1 ~= 0 or ttl < 1 then return -4 end
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], ARGV[1], now + ttl)
return 1
