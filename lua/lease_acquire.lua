#!lua
--[[ lease_acquire: take one of N slots of a fleet-wide counting semaphore.
KEYS[1]  holders  zset    holder id -> expiry (server ms)
KEYS[2]  fence    string  monotonic fencing counter (never expires)
ARGV[1]  holder   str     unique per holding attempt, e.g. "<host>:<random>"
ARGV[2]  slots    int     N >= 1
ARGV[3]  ttl_ms   int     >= 1; the grant lapses this long after the call unless renewed
Returns  {1, fence}    granted; fence strictly increases with every grant of this lease
         {0, holders}  all N slots are held by others (holders = live holder count)
Errors   -4            bad input: wrong key/arg count, empty holder, N or ttl_ms not a positive integer
A current holder calling again has its expiry refreshed and gets a new fence, never a second slot.
]]

local function positive_int(text)
  local n = tonumber(text)
  if n and n >= 1 and n < 2 ^ 53 and n == math.floor(n) then return n end
  return nil
end

if #KEYS ~= 2 or #ARGV ~= 3 then return -4 end
local holder = ARGV[1]
local slots = positive_int(ARGV[2])
local ttl_ms = positive_int(ARGV[3])
if holder == '' or not slots or not ttl_ms then return -4 end

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- an expired holder frees its slot here, so a dead host needs no one to clean up after it
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if not redis.call('ZSCORE', KEYS[1], holder) then
  local held = redis.call('ZCARD', KEYS[1])
  if held >= slots then return {0, held} end
end

redis.call('ZADD', KEYS[1], now_ms + ttl_ms, holder)
-- the set lives as long as its longest holder, so an abandoned lease leaves no key behind
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.floor(tonumber(last[2])))
return {1, redis.call('INCR', KEYS[2])}
