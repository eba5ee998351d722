#!lua
--[[ job_extend: renew a daemon's locks in one call, and report pending cancel requests.
KEYS[1]  active   zset  id -> lock deadline ms
KEYS[2]  lock     hash  id -> lock token
KEYS[3]  cancel   hash  id -> cancel request expiry ms
ARGV[1]  lock_ms  int   new lock duration from server now, 1 ms to 24 h
ARGV[2]  id       str   job id; ARGV[2..3] repeat once per held job, 1 to 1000
ARGV[3]  token    str   lock token of the claim, "<host>:<n>"
Returns  {{lost ids}, {ids with a live cancel request}}; a lost lock is not renewed, and a
         lock whose deadline has passed is lost even before a sweep took it: the owner
         may already have stopped the run, so it must not come back to life
Errors   -4 bad call (key count, argument count, a field out of shape or bounds); nothing is
         written
]]
-- Plain digits only: tonumber would also take nan, inf, hex, exponents and padding.
local function int(text, lo, hi)
  if #text > 15 or not string.find(text, '^%d+$') then return nil end
  local v = tonumber(text)
  if v >= lo and v <= hi then return v end
end

local lock_ms = int(ARGV[1] or '', 1, 86400000)
if #KEYS ~= 3 or not lock_ms or #ARGV < 3 or #ARGV % 2 ~= 1 or #ARGV > 2001 then return -4 end
local ids, tokens = {}, {}
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if #id > 128 or #token > 90 or not string.find(id, '^[%w][%w%._%-]*$')
      or not string.find(token, '^[%w%._%-]+:%d+$') then
    return -4
  end
  ids[#ids + 1] = id
  tokens[#tokens + 1] = token
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local locks = redis.call('HMGET', KEYS[2], unpack(ids))
local deadlines = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local requests = redis.call('HMGET', KEYS[3], unpack(ids))
local lost, cancels, renew, stale = {}, {}, {}, {}
for i, id in ipairs(ids) do
  local deadline = tonumber(deadlines[i])
  if locks[i] ~= tokens[i] or not deadline or deadline <= now then
    lost[#lost + 1] = id
  else
    renew[#renew + 1] = now + lock_ms; renew[#renew + 1] = id
    local expiry = tonumber(requests[i])
    if expiry and expiry > now then
      cancels[#cancels + 1] = id
    elseif requests[i] then
      stale[#stale + 1] = id
    end
  end
end
if #renew > 0 then redis.call('ZADD', KEYS[1], 'XX', unpack(renew)) end
if #stale > 0 then redis.call('HDEL', KEYS[3], unpack(stale)) end
return {lost, cancels}
