#!lua
--[[ job_cancel_request: ask the daemon running a job to stop it, if the claim is still current.
KEYS[1]  lock    hash  id -> lock token
KEYS[2]  cancel  hash  id -> cancel request expiry ms
ARGV[1]  id      str   job id (1-128 of A-Z a-z 0-9 . _ -)
ARGV[2]  token   str   the claim the caller saw running, "<host>:<n>"
ARGV[3]  ttl_ms  int   how long the request stands, 1 ms to 24 h
Returns  1 requested
Errors   -1 the claim is no longer current (finished, stalled or re-claimed); -4 bad call (key
         count, argument count, a field out of shape or bounds); nothing is written
]]
-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not string.find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end

if #KEYS ~= 2 or #ARGV ~= 3 then return -4 end
local ttl = int(ARGV[3], 1, 86400000)
if not ttl or #ARGV[1] > 128 or #ARGV[2] > 90 or not string.find(ARGV[1], '^[%w][%w%._%-]*$')
    or not string.find(ARGV[2], '^[%w%._%-]+:%d+$') then
  return -4
end
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], ARGV[1], now + ttl)
return 1
