#!lua
--[[ job_cancel: cancel a job that has not started; for a running one, name its claim.
KEYS[1]  wait      list  ready ids
KEYS[2]  delayed   zset  id -> due ms
KEYS[3]  active    zset  id -> lock deadline ms
KEYS[4]  done      zset  id -> finished ms
KEYS[5]  data      hash  id -> job JSON
KEYS[6]  lock      hash  id -> lock token
KEYS[7]  result    hash  id -> final result JSON
KEYS[8]  runs      hash  run id -> run record JSON
KEYS[9]  runs_idx  zset  run id -> recorded ms
ARGV[1]  id        str   job id (1-128 of A-Z a-z 0-9 . _ -)
ARGV[2]  result    str   result JSON (an object) to write when cancelled before start
ARGV[3]  run_id    str   run record id "<id>#<attempt>" to mirror
ARGV[4]  run       str   run record JSON (an object)
Returns  {1} cancelled before start; {2, token} running under that claim (nothing written);
         {3} already finished (nothing written)
Errors   -2 no such job; -3 the job is in no state (debris); -4 bad call (key count, argument
         count, a field out of shape); nothing is written
]]
local function object(s)  -- a JSON object's shape; readers decode, so no full parse here
  return string.byte(s, 1) == 123 and string.byte(s, -1) == 125
end

if #KEYS ~= 9 or #ARGV ~= 4 then return -4 end
local id, run_id = ARGV[1], ARGV[3]
local run_of = #run_id <= 150 and string.match(run_id, '^([%w][%w%._%-]*)#%d+$')
if #id > 128 or not string.find(id, '^[%w][%w%._%-]*$') or not run_of or #run_of > 128
    or not object(ARGV[2]) or not object(ARGV[4]) then
  return -4
end
if redis.call('ZSCORE', KEYS[4], id) then return {3} end
if redis.call('ZSCORE', KEYS[3], id) then return {2, redis.call('HGET', KEYS[6], id) or ''} end
if redis.call('HEXISTS', KEYS[5], id) == 0 then return -2 end
if redis.call('ZREM', KEYS[2], id) == 0 and redis.call('LREM', KEYS[1], 1, id) == 0 then
  return -3
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[7], id, ARGV[2])
redis.call('ZADD', KEYS[4], now, id)
redis.call('HSET', KEYS[8], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[9], now, ARGV[3])
return {1}
