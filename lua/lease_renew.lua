#!lua
--[[ lease_renew: push back the expiry of a current holder of a fleet lease.
KEYS[1]  holders  zset    holder id -> expiry (server ms)
ARGV[1]  holder   str     the id the grant was made to
ARGV[2]  ttl_ms   int     1 ms to 24 h; new expiry = server now + ttl_ms
Returns  1   renewed
         0   not a holder (never granted, released, or already expired: the lease is lost)
Errors   -4  bad call: wrong key/arg count, holder empty or over 255 bytes, ttl_ms out of
             bounds; nothing is written
]]

-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not string.find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end

if #KEYS ~= 1 or #ARGV ~= 2 then return -4 end
local holder = ARGV[1]
local ttl_ms = int(ARGV[2], 1, 86400000)
if holder == '' or #holder > 255 or not ttl_ms then return -4 end

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- a lapsed holder may already have been counted out by an acquire: it must not come back
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if not redis.call('ZSCORE', KEYS[1], holder) then return 0 end

redis.call('ZADD', KEYS[1], now_ms + ttl_ms, holder)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.floor(tonumber(last[2])))
return 1
