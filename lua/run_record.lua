#!lua
--[[ run_record: store run records in the fleet's mirror unless a later claim owns the job.
KEYS[1]  lock      hash  id -> lock token of the current claim
KEYS[2]  runs      hash  run id "<id>#<attempt>" -> run record JSON (fleet mirror)
KEYS[3]  runs_idx  zset  run id -> recorded ms
ARGV[1]  id        str   job id; ARGV[1..5] repeat once per record (at most 1,000)
ARGV[2]  token     str   lock token of the claim whose run the record tells
ARGV[3]  run_id    str   "<id>#<attempt>" of this id
ARGV[4]  record    str   run record JSON (an object)
ARGV[5]  at_ms     int   when it was recorded, ms since the epoch (at most 10^15)
Returns  {stored run ids}, in the order given. A record is stored while its claim holds the
         lock; or, its claim swept, while no other claim holds the lock and the run has no
         record yet (the outcome of a run cut off from Redis past its lock: the next pickup
         settles on it instead of running the job again). Otherwise (another claim holds the
         job, or recorded this attempt) it is not stored: a run that outlived its claim
         reports nothing over the run that replaced it
Errors   -4 bad call (key count, argument count, a field out of shape); nothing is written
]]
local find, sub, byte = string.find, string.sub, string.byte
if #KEYS ~= 3 or #ARGV < 5 or #ARGV % 5 ~= 0 or #ARGV > 5000 then return -4 end
local function int(text, lo, hi)
  if #text > 15 or not find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end
local function object(s)  -- a JSON object's shape; readers decode, so no full parse here
  return byte(s, 1) == 123 and byte(s, -1) == 125
end
local ids = {}
for i = 1, #ARGV, 5 do
  local id, token, run_id = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local n = #id
  if n > 128 or #token > 90 or not find(id, '^[%w][%w%._%-]*$')
      or not find(token, '^[%w%._%-]+:%d+$')
      or byte(run_id, n + 1) ~= 35 or sub(run_id, 1, n) ~= id or #run_id > n + 16
      or not find(run_id, '^%d+$', n + 2)
      or not object(ARGV[i + 3]) or not int(ARGV[i + 4], 0, 1e15) then
    return -4
  end
  ids[#ids + 1] = id
end

local locks = redis.call('HMGET', KEYS[1], unpack(ids))
local stored, fields, scores = {}, {}, {}
for n in ipairs(ids) do
  local a = (n - 1) * 5 + 1
  local held = locks[n] == ARGV[a + 1]
  if held or (not locks[n] and redis.call('HEXISTS', KEYS[2], ARGV[a + 2]) == 0) then
    stored[#stored + 1] = ARGV[a + 2]
    fields[#fields + 1] = ARGV[a + 2]
    fields[#fields + 1] = ARGV[a + 3]
    scores[#scores + 1] = ARGV[a + 4]
    scores[#scores + 1] = ARGV[a + 2]
  end
end
if #stored == 0 then return stored end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('ZADD', KEYS[3], unpack(scores))
return stored
