#!lua
--[[ job_claim: promote due delayed jobs, then take up to `count` ready jobs into active.
KEYS[1]  wait      list  ready ids
KEYS[2]  delayed   zset  id -> due ms
KEYS[3]  active    zset  id -> lock deadline ms
KEYS[4]  data      hash  id -> job JSON
KEYS[5]  lock      hash  id -> lock token
KEYS[6]  attempts  hash  id -> attempts spent
KEYS[7]  stalls    hash  id -> stall count
KEYS[8]  queued    hash  id -> enqueue instant ms
KEYS[9]  marker    zset  wake-up marker
KEYS[10] paused    str   present while the queue is paused
KEYS[11] fence     str   monotonic counter behind lock tokens
ARGV[1]  count     int   0..1000 jobs to claim (0: only promote and report the next due)
ARGV[2]  host      str   claiming host, 1-63 of A-Z a-z 0-9 . _ -; tokens are "<host>:<fence>"
ARGV[3]  lock_ms   int   lock duration, 1 ms to 24 h
Returns  {now_ms, next_due_ms or 0, id, token, attempt, stalls, queued_ms, job, ...}
         six fields per claimed job; attempt is 1-based; nothing is claimed while paused.
         A claim that took `count` jobs leaves the marker: more may be ready
Errors   -4 bad call (key count, argument count, a field out of shape or bounds); nothing is
         written
]]
-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not string.find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end

if #KEYS ~= 11 or #ARGV ~= 3 then return -4 end
local count, lock_ms, host = int(ARGV[1], 0, 1000), int(ARGV[3], 1, 86400000), ARGV[2]
if not count or not lock_ms or #host > 63 or not string.find(host, '^[%w%._%-]+$') then
  return -4
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The head of delayed first: due jobs are looked for only when the earliest is due.
local out = {now, 0}
local next_due = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if next_due[2] and tonumber(next_due[2]) <= now then
  local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
  redis.call('ZREM', KEYS[2], unpack(due))
  redis.call('RPUSH', KEYS[1], unpack(due))
  next_due = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
end
if next_due[2] then out[2] = tonumber(next_due[2]) end
if count == 0 or redis.call('EXISTS', KEYS[10]) == 1 then return out end

local popped = redis.call('LPOP', KEYS[1], count)
if not popped then return out end

local found = redis.call('HMGET', KEYS[4], unpack(popped))
local ids, jobs = {}, {}
for i, id in ipairs(popped) do
  if found[i] then  -- an id without data is debris: drop it
    ids[#ids + 1] = id
    jobs[#jobs + 1] = found[i]
  end
end
if #ids == 0 then return out end

local attempts = redis.call('HMGET', KEYS[6], unpack(ids))
local stalls = redis.call('HMGET', KEYS[7], unpack(ids))
local queued = redis.call('HMGET', KEYS[8], unpack(ids))
local last = redis.call('INCRBY', KEYS[11], #ids)
local deadline = now + lock_ms
local active, locks = {}, {}
for i, id in ipairs(ids) do
  local token = host .. ':' .. (last - #ids + i)
  active[#active + 1] = deadline; active[#active + 1] = id
  locks[#locks + 1] = id; locks[#locks + 1] = token
  local n = #out
  out[n + 1] = id
  out[n + 2] = token
  out[n + 3] = (tonumber(attempts[i]) or 0) + 1
  out[n + 4] = tonumber(stalls[i]) or 0
  out[n + 5] = tonumber(queued[i]) or 0
  out[n + 6] = jobs[i]
end
redis.call('ZADD', KEYS[3], unpack(active))
redis.call('HSET', KEYS[5], unpack(locks))
-- Took all it asked for: more may be ready, so a host with room is told. (A list that ran
-- out at exactly `count` costs that host one empty claim; asking LLEN would cost every claim.)
if #popped == count then redis.call('ZADD', KEYS[9], 0, 'w') end
return out
