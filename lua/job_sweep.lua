#!lua
--[[ job_sweep: jobs whose lock deadline passed go back to wait, or fail past max stalls.
KEYS[1]  active      zset  id -> lock deadline ms
KEYS[2]  lock        hash  id -> lock token
KEYS[3]  wait        list  ready ids (a stalled job goes to the head)
KEYS[4]  done        zset  id -> finished ms
KEYS[5]  stalls      hash  id -> stall count
KEYS[6]  result      hash  id -> final result JSON
KEYS[7]  marker      zset  wake-up marker
KEYS[8]  cancel      hash  id -> cancel request expiry ms
ARGV[1]  max_stalls  int   stalls allowed before the job fails, 0..1000
ARGV[2]  limit       int   1..1000 jobs looked at per call
ARGV[3]  result      str   result JSON (an object) written for a job that stalled too often
Returns  {{requeued ids}, {failed ids}}
Errors   -4 bad call (key count, argument count, a field out of shape or bounds); nothing is
         written
]]
-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not string.find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end

if #KEYS ~= 8 or #ARGV ~= 3 then return -4 end
local max_stalls, limit = int(ARGV[1], 0, 1000), int(ARGV[2], 1, 1000)
-- the result's shape: a JSON object; readers decode it
if not max_stalls or not limit or string.byte(ARGV[3], 1) ~= 123
    or string.byte(ARGV[3], -1) ~= 125 then
  return -4
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local requeued, failed = {}, {}
for _, id in ipairs(expired) do
  if redis.call('HINCRBY', KEYS[5], id, 1) > max_stalls then
    failed[#failed + 1] = id
    redis.call('HSET', KEYS[6], id, ARGV[3])
    redis.call('ZADD', KEYS[4], now, id)
  else
    requeued[#requeued + 1] = id
  end
end
if #expired > 0 then
  redis.call('ZREM', KEYS[1], unpack(expired))
  redis.call('HDEL', KEYS[2], unpack(expired))
  redis.call('HDEL', KEYS[8], unpack(expired))
end
if #requeued > 0 then
  -- reversed so the longest-waiting job ends up first
  for i = #requeued, 1, -1 do redis.call('LPUSH', KEYS[3], requeued[i]) end
  redis.call('ZADD', KEYS[7], 0, 'w')
end
return {requeued, failed}
