#!lua
--[[ job_finish: end claims, fenced by their lock tokens: finish for good, retry, or defer.
KEYS[1]  active     zset  id -> lock deadline ms
KEYS[2]  lock       hash  id -> lock token
KEYS[3]  delayed    zset  id -> due ms
KEYS[4]  done       zset  id -> finished ms
KEYS[5]  data       hash  id -> job JSON
KEYS[6]  queued     hash  id -> enqueue instant
KEYS[7]  attempts   hash  id -> attempts spent
KEYS[8]  stalls     hash  id -> stall count
KEYS[9]  defer      hash  id -> latest defer record JSON
KEYS[10] result     hash  id -> final result JSON
KEYS[11] cancel     hash  id -> cancel request expiry ms
KEYS[12] runs       hash  run id -> run record JSON
KEYS[13] runs_idx   zset  run id -> recorded ms
KEYS[14] marker     zset  wake-up marker
ARGV[1]  keep_done     int  finished jobs kept at most (0..1e9)
ARGV[2]  keep_done_ms  int  finished jobs kept at most this long (0..10 years)
ARGV[3]  keep_runs     int  mirrored run records kept at most (0..1e9)
ARGV[4]  keep_runs_ms  int  mirrored run records kept at most this long (0..10 years)
                           ARGV[1..4] all "": no retention this call (a caller that ends many
                           small batches trims on some of them, at its own pace)
ARGV[5]  action     str   finish | retry | defer; ARGV[5..12] repeat once per job, 1 to 1000
ARGV[6]  id         str   job id (1-128 of A-Z a-z 0-9 . _ -)
ARGV[7]  token      str   lock token of the claim, "<host>:<n>" (id and token are checked
                          for shape only when they match no lock: the lock hash holds
                          only well-shaped ones)
ARGV[8]  delay_ms   int   retry/defer: due after this long (server clock), at most 10 years;
                          finish: 0
ARGV[9]  payload    str   finish: result JSON; retry/defer: defer record JSON (an object)
ARGV[10] run_id     str   run record id "<id>#<attempt>" of this job to mirror, "" for none
ARGV[11] run        str   run record JSON (an object), "" exactly when run_id is ""
ARGV[12] cancelled  str   retry/defer: result JSON to finish with instead while a cancel
                          request stands for the job; "" to retry/defer regardless; finish:
                          not read
Returns  flat list of codes, one per job: 1 done; 2 a retry or defer finished as `cancelled`
         instead (an operator asked to cancel the job); -1 lock lost (nothing written for it)
Errors   -4 bad call (key count, argument count, an unknown action, a field out of shape or
         bounds); nothing is written
A claim ends once: a second ending for the same id in one call gets -1.
A retry counts an attempt; a defer counts none, nor does one that finished as cancelled.
A defer record whose reason repeats the previous one's gets the previous `since` (or `at`):
how long the job has waited for that reason.
Retention trims at most 200 of each per call, the count once its excess reaches
min(keep / 50, 200): up to that many over `keep_done` / `keep_runs` may stand between trims.
]]
local YEAR = 31536000000
local find, byte, sub = string.find, string.byte, string.sub
-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end
local function object(s)  -- a JSON object's shape; readers decode, so no full parse here
  return byte(s, 1) == 123 and byte(s, -1) == 125
end
-- One claim's ending, field by field; nil when one is out of shape. Its id and token are
-- looked at once the locks are read (below): only one that matches no lock needs it.
local actions, argv = {finish = true, retry = true, defer = true}, ARGV
local function ending(i)
  local id, run_id, run, cancelled = argv[i + 1], argv[i + 5], argv[i + 6], argv[i + 7]
  local delay, payload = int(argv[i + 3], 0, 10 * YEAR), argv[i + 4]
  if not actions[argv[i]] or not delay or byte(payload, 1) ~= 123 or byte(payload, -1) ~= 125
      or (cancelled ~= '' and not object(cancelled)) then
    return nil
  end
  if run ~= '' or run_id ~= '' then  -- "<this id>#<attempt>" and its record, or neither
    local n = #id
    if not object(run) or byte(run_id, n + 1) ~= 35 or sub(run_id, 1, n) ~= id
        or #run_id > n + 16 or not find(run_id, '^%d+$', n + 2) then
      return nil
    end
  end
  return {argv[i], id, argv[i + 2], delay, payload, run_id, run, cancelled}
end

local keep_done, keep_done_ms = int(ARGV[1] or '', 0, 1e9), int(ARGV[2] or '', 0, 10 * YEAR)
local keep_runs, keep_runs_ms = int(ARGV[3] or '', 0, 1e9), int(ARGV[4] or '', 0, 10 * YEAR)
local trim = not (ARGV[1] == '' and ARGV[2] == '' and ARGV[3] == '' and ARGV[4] == '')
local n = #ARGV - 4
if #KEYS ~= 14 or n <= 0 or n % 8 ~= 0 or n > 8000
    or (trim and not (keep_done and keep_done_ms and keep_runs and keep_runs_ms)) then
  return -4
end
local items, ids = {}, {}
for i = 5, #ARGV, 8 do
  local it = ending(i)
  if not it then return -4 end
  items[#items + 1] = it
  ids[#ids + 1] = it[2]
end

-- A job deferred again for the same reason keeps the instant it first waited for it (`since`).
local function keep_since(prev, payload)
  if not prev then return payload end
  local ok, old = pcall(cjson.decode, prev)
  local ok2, new = pcall(cjson.decode, payload)
  if not (ok and ok2 and type(old) == 'table' and type(new) == 'table') then return payload end
  if old.reason ~= new.reason then return payload end
  new.since = old.since or old.at
  return cjson.encode(new)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local locks = redis.call('HMGET', KEYS[2], unpack(ids))
-- The lock hash holds only ids and tokens of their shape (enqueue and claim check them), so
-- an ending that matches its lock has both; one that does not is -1 if shaped, else -4.
for i, it in ipairs(items) do
  local id, token = it[2], it[3]
  if locks[i] ~= token and not (#id <= 128 and #token <= 90
      and find(id, '^[%w][%w%._%-]*$') and find(token, '^[%w%._%-]+:%d+$')) then
    return -4
  end
end
-- Cancel requests matter only to an ending that would run the job again (honoured, or dropped
-- when it carries no `cancelled`): a batch of plain finishes reads none (a request left for a
-- finished job is read by nothing, and goes with the job at retention).
local requests = {}
for _, it in ipairs(items) do
  if it[1] ~= 'finish' then
    requests = redis.call('HMGET', KEYS[11], unpack(ids))
    break
  end
end
local asked = {}
local out, held, results, done, later, defers, runs, run_idx = {}, {}, {}, {}, {}, {}, {}, {}
local earliest, ended = false, {}
for i, it in ipairs(items) do
  local action, id, token, delay, payload, run_id, run, cancelled = unpack(it)
  if locks[i] ~= token or ended[id] then
    out[i] = -1
  else
    out[i] = 1
    -- a job its owner would run again, which an operator asked to cancel, ends here
    if action ~= 'finish' and cancelled ~= '' and (tonumber(requests[i]) or 0) > now then
      action, payload, out[i] = 'finish', cancelled, 2
    end
    ended[id] = true
    held[#held + 1] = id
    if requests[i] then asked[#asked + 1] = id end
    if action == 'finish' then
      results[#results + 1] = id; results[#results + 1] = payload
      done[#done + 1] = now; done[#done + 1] = id
    else
      if action == 'retry' then
        redis.call('HINCRBY', KEYS[7], id, 1)
      else
        payload = keep_since(redis.call('HGET', KEYS[9], id), payload)
      end
      later[#later + 1] = now + delay; later[#later + 1] = id
      defers[#defers + 1] = id; defers[#defers + 1] = payload
      if not earliest or now + delay < earliest then earliest = now + delay end
    end
    if run_id ~= '' and run ~= '' then
      runs[#runs + 1] = run_id; runs[#runs + 1] = run
      run_idx[#run_idx + 1] = now; run_idx[#run_idx + 1] = run_id
    end
  end
end

if #held > 0 then
  redis.call('ZREM', KEYS[1], unpack(held))
  redis.call('HDEL', KEYS[2], unpack(held))
end
if #asked > 0 then redis.call('HDEL', KEYS[11], unpack(asked)) end
if #results > 0 then
  redis.call('HSET', KEYS[10], unpack(results))
  redis.call('ZADD', KEYS[4], unpack(done))
end
if #later > 0 then
  redis.call('ZADD', KEYS[3], unpack(later))
  redis.call('HSET', KEYS[9], unpack(defers))
  redis.call('ZADD', KEYS[14], earliest, 'd')
end
if #runs > 0 then
  redis.call('HSET', KEYS[12], unpack(runs))
  redis.call('ZADD', KEYS[13], unpack(run_idx))
end

-- Retention: the oldest past the count, then the oldest past the age, 200 at most of each.
-- The count is trimmed once its excess reaches a fiftieth of what is kept (at most 200): a
-- busy queue trims every few calls, not a few jobs at every call; a small keep stays exact.
local function expired(index, keep, keep_ms)
  local old = {}
  local excess = redis.call('ZCARD', index) - keep
  if excess > 0 and excess >= math.min(math.floor(keep / 50), 200) then
    old = redis.call('ZRANGE', index, 0, math.min(excess, 200) - 1)
  end
  if #old == 0 then
    old = redis.call('ZRANGEBYSCORE', index, '-inf', now - keep_ms, 'LIMIT', 0, 200)
  end
  if #old > 0 then redis.call('ZREM', index, unpack(old)) end
  return old
end
if not trim then return out end
local gone = expired(KEYS[4], keep_done, keep_done_ms)
if #gone > 0 then
  for k = 5, 11 do  -- data, queued, attempts, stalls, defer, result and a cancel request
    redis.call('HDEL', KEYS[k], unpack(gone))
  end
end
local gone_runs = expired(KEYS[13], keep_runs, keep_runs_ms)
if #gone_runs > 0 then redis.call('HDEL', KEYS[12], unpack(gone_runs)) end
return out
