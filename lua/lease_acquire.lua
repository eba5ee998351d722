#!lua
--[[ lease_acquire: take one of N slots of a fleet-wide counting semaphore.
KEYS[1]  holders  zset    holder id -> expiry (server ms)
KEYS[2]  fence    string  monotonic fencing counter (never expires)
ARGV[1]  holder   str     unique per holding attempt, e.g. "<host>:<random>"; 1-255 bytes
ARGV[2]  slots    int     N, 1..1000000
ARGV[3]  ttl_ms   int     1 ms to 24 h; the grant lapses this long after the call unless renewed
ARGV[4]  over     int     optional, 0 or 1: 1 takes the slot even when all N are held (a holder
                          that already runs, granted while Redis was away, is counted again so
                          that nobody else is let in past the bound)
Returns  {1, fence}    granted; fence strictly increases with every grant of this lease
         {0, holders}  all N slots are held by others (holders = live holder count)
         {2, fence}    (over = 1 only) all N were held: taken past the bound, fenced as a grant
Errors   -4            bad call: wrong key/arg count, holder empty or over 255 bytes, N or ttl_ms
                       out of bounds; nothing is written
A current holder calling again has its expiry refreshed and gets a new fence, never a second slot.
]]

-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not string.find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end

if #KEYS ~= 2 or #ARGV < 3 or #ARGV > 4 then return -4 end
local holder = ARGV[1]
local slots = int(ARGV[2], 1, 1000000)
local ttl_ms = int(ARGV[3], 1, 86400000)
local over = int(ARGV[4] or '0', 0, 1)
if holder == '' or #holder > 255 or not slots or not ttl_ms or not over then return -4 end

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- an expired holder frees its slot here, so a dead host needs no one to clean up after it
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
local granted = 1
if not redis.call('ZSCORE', KEYS[1], holder) then
  local held = redis.call('ZCARD', KEYS[1])
  if held >= slots then
    if over == 0 then return {0, held} end
    granted = 2
  end
end

redis.call('ZADD', KEYS[1], now_ms + ttl_ms, holder)
-- the set lives as long as its longest holder, so an abandoned lease leaves no key behind
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.floor(tonumber(last[2])))
return {granted, redis.call('INCR', KEYS[2])}
