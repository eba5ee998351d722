#!lua
--[[ run_record: store run records in the fleet's mirror unless a later claim owns the job.
KEYS[1]  lock      hash  id -> lock token of the current claim
KEYS[2]  runs      hash  run id "<id>#<attempt>" -> run record JSON (fleet mirror)
KEYS[3]  runs_idx  zset  run id -> recorded ms (the server's TIME)
ARGV[1]  id        str   job id; ARGV[1..4] repeat once per record (at most 1,000)
ARGV[2]  token     str   lock token of the claim whose run the record tells, "<host>:<n>"
ARGV[3]  run_id    str   "<id>#<attempt>" of this id
ARGV[4]  record    str   run record JSON (an object)
Returns  {stored run ids}, in the order given. A record is stored while its claim holds the
         lock; or, its claim swept, while no other claim holds the lock and the run has no
         record yet by this claim or a later one (the outcome of a run cut off from Redis past
         its lock: the next pickup settles on it instead of running the job again). An earlier
         claim's record of the same attempt is a run that was stopped and handed back (a run
         that reached its exit ends the job or spends the attempt), so the later run's record
         replaces it. Otherwise (another claim holds the job, or this or a later claim recorded
         the attempt) it is not stored: a run that outlived its claim reports nothing over the
         run that replaced it
Errors   -4 bad call (key count, argument count, a field out of shape); nothing is written
]]
local find, sub, byte, match = string.find, string.sub, string.byte, string.match
if #KEYS ~= 3 or #ARGV < 4 or #ARGV % 4 ~= 0 or #ARGV > 4000 then return -4 end
local function object(s)  -- a JSON object's shape; readers decode, so no full parse here
  return byte(s, 1) == 123 and byte(s, -1) == 125
end
local ids = {}
for i = 1, #ARGV, 4 do
  local id, token, run_id = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local n = #id
  if n > 128 or #token > 90 or not find(id, '^[%w][%w%._%-]*$')
      or not find(token, '^[%w%._%-]+:%d+$')
      or byte(run_id, n + 1) ~= 35 or sub(run_id, 1, n) ~= id or #run_id > n + 16
      or not find(run_id, '^%d+$', n + 2)
      or not object(ARGV[i + 3]) then
    return -4
  end
  ids[#ids + 1] = id
end

-- the claim number of a stored record's writer: 0 for a record that names none (an older
-- release's) or does not decode, so any named claim comes after it
local function writer(raw)
  local ok, record = pcall(cjson.decode, raw)
  local claim = ok and type(record) == 'table' and record.claim
  return tonumber(type(claim) == 'string' and match(claim, ':(%d+)$') or '0') or 0
end
local function claim_number(token) return tonumber(match(token, ':(%d+)$')) end

local locks = redis.call('HMGET', KEYS[1], unpack(ids))
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local stored, fields, scores = {}, {}, {}
for n in ipairs(ids) do
  local a = (n - 1) * 4 + 1
  local run_id = ARGV[a + 2]
  local ok = locks[n] == ARGV[a + 1]
  if not ok and not locks[n] then
    local existing = redis.call('HGET', KEYS[2], run_id)
    ok = not existing or writer(existing) < claim_number(ARGV[a + 1])
  end
  if ok then
    stored[#stored + 1] = run_id
    fields[#fields + 1] = run_id
    fields[#fields + 1] = ARGV[a + 3]
    scores[#scores + 1] = now
    scores[#scores + 1] = run_id
  end
end
if #stored == 0 then return stored end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('ZADD', KEYS[3], unpack(scores))
return stored
