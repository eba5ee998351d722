#!lua
--[[ job_enqueue: add jobs to a queue, each ready now (wait) or due later (delayed).
KEYS[1]  data       hash  id -> job JSON
KEYS[2]  queued     hash  id -> enqueue instant (server ms)
KEYS[3]  wait       list  ready ids
KEYS[4]  delayed    zset  id -> due ms
KEYS[5]  dedup      hash  dedup key -> "<window end ms> <id>"
KEYS[6]  dedup_exp  zset  dedup key -> when to look at the entry again (purge schedule)
KEYS[7]  done       zset  finished ids
KEYS[8]  marker     zset  wake-up marker daemons block on
ARGV[1]  id         str   job id: 1-128 of A-Z a-z 0-9 . _ -, a letter or digit first;
                          ARGV[1..6] repeat once per job, 1 to 1000 jobs
ARGV[2]  job        str   job JSON: an object, at most 65536 bytes
ARGV[3]  due_ms     int   absolute due instant (server clock), 0 for none; at most now + 10 years
ARGV[4]  delay_ms   int   delay from server now, 0 for none; at most 10 years
ARGV[5]  dedup      str   dedup key, "" for none; at most 1024 bytes
ARGV[6]  window_ms  int   how long the dedup key holds after enqueue; at most a year
Returns  flat {code, id, code, id, ...}, one pair per job:
         1 created; 0 duplicate (id is the existing job's); -3 the id is already taken
Errors   -4 bad call (key count, argument count, a field out of shape or bounds); nothing is
         written
A dedup key holds while its window lasts or while its job is not finished, whichever is longer.
]]
local YEAR = 31536000000
-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not string.find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end
local function id_shape(s)
  return #s <= 128 and string.find(s, '^[%w][%w%._%-]*$') ~= nil
end
local function object(s)  -- a JSON object's shape; readers decode, so no full parse here
  return string.byte(s, 1) == 123 and string.byte(s, -1) == 125
end

local n = #ARGV
if #KEYS ~= 8 or n == 0 or n % 6 ~= 0 or n > 6000 then return -4 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local items = {}
for i = 1, n, 6 do
  local due, delay = int(ARGV[i + 2], 0, now + 10 * YEAR), int(ARGV[i + 3], 0, 10 * YEAR)
  local window = int(ARGV[i + 5], 0, YEAR)
  if not id_shape(ARGV[i]) or not object(ARGV[i + 1]) or #ARGV[i + 1] > 65536
      or #ARGV[i + 4] > 1024 or not due or not delay or not window then
    return -4
  end
  items[#items + 1] = {ARGV[i], ARGV[i + 1], due, delay, ARGV[i + 4], window}
end

local function live(id)
  return redis.call('HEXISTS', KEYS[1], id) == 1 and not redis.call('ZSCORE', KEYS[7], id)
end

-- The job a dedup key names while it still holds (window open, or its job unfinished).
local function holder(key)
  local entry = redis.call('HGET', KEYS[5], key)
  if not entry then return false end
  local window_end, id = string.match(entry, '^(%d+) (.+)$')
  if id and (tonumber(window_end) > now or live(id)) then return id end
  return false
end

local function purge_lapsed_dedup()
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 20)
  for _, key in ipairs(lapsed) do
    if holder(key) then
      redis.call('ZADD', KEYS[6], now + 60000, key)  -- its job is still live: look again later
    else
      redis.call('HDEL', KEYS[5], key)
      redis.call('ZREM', KEYS[6], key)
    end
  end
end

local ids = {}
for i, it in ipairs(items) do ids[i] = it[1] end
local taken = redis.call('HMGET', KEYS[1], unpack(ids))
local seen, out, data, queued, ready, later, dedup, dedup_exp = {}, {}, {}, {}, {}, {}, {}, {}
local earliest = false
local purged = false

for i, it in ipairs(items) do
  local id, job, due, delay, key, window = it[1], it[2], it[3], it[4], it[5], it[6]
  local existing = false
  if key ~= '' then
    if not purged then purge_lapsed_dedup(); purged = true end
    existing = seen['dedup:' .. key] or holder(key)
  end
  if existing then
    out[#out + 1] = 0; out[#out + 1] = existing
  elseif taken[i] or seen[id] then
    out[#out + 1] = -3; out[#out + 1] = id
  else
    seen[id] = true
    data[#data + 1] = id; data[#data + 1] = job
    queued[#queued + 1] = id; queued[#queued + 1] = now
    if key ~= '' then
      seen['dedup:' .. key] = id
      dedup[#dedup + 1] = key; dedup[#dedup + 1] = (now + window) .. ' ' .. id
      dedup_exp[#dedup_exp + 1] = now + window; dedup_exp[#dedup_exp + 1] = key
    end
    local at = (due > now and due) or (delay > 0 and now + delay) or 0
    if at > 0 then
      later[#later + 1] = at; later[#later + 1] = id
      if not earliest or at < earliest then earliest = at end
    else
      ready[#ready + 1] = id
    end
    out[#out + 1] = 1; out[#out + 1] = id
  end
end

if #data > 0 then
  redis.call('HSET', KEYS[1], unpack(data))
  redis.call('HSET', KEYS[2], unpack(queued))
end
if #dedup > 0 then
  redis.call('HSET', KEYS[5], unpack(dedup))
  redis.call('ZADD', KEYS[6], unpack(dedup_exp))
end
if #ready > 0 then
  redis.call('RPUSH', KEYS[3], unpack(ready))
  redis.call('ZADD', KEYS[8], 0, 'w')
end
if #later > 0 then
  redis.call('ZADD', KEYS[4], unpack(later))
  redis.call('ZADD', KEYS[8], earliest, 'd')
end
return out
