#!lua
--[[ job_extend: renew a daemon's locks in one call, and report pending cancel requests.
KEYS[1]  active   zset  id -> lock deadline ms
KEYS[2]  lock     hash  id -> lock token
KEYS[3]  cancel   hash  id -> cancel request expiry ms
ARGV[1]  lock_ms  int   new lock duration from server now
ARGV[2]  id       str   job id; ARGV[2..3] repeat once per held job
ARGV[3]  token    str   lock token of the claim
Returns  {{lost ids}, {ids with a live cancel request}}; a lost lock is not renewed, and a
         lock whose deadline has passed is lost even before a sweep took it: the owner
         may already have stopped the run, so it must not come back to life
Errors   -4 bad input; nothing is written
]]
local lock_ms = tonumber(ARGV[1])
-- x % 1 ~= 0 also rejects nan and inf, which pass plain comparisons
if not lock_ms or lock_ms % 1 ~= 0 or lock_ms < 1 or #ARGV < 3 or (#ARGV - 1) % 2 ~= 0 then
  return -4
end
local ids, tokens = {}, {}
for i = 2, #ARGV, 2 do
  if ARGV[i] == '' or ARGV[i + 1] == '' then return -4 end
  ids[#ids + 1] = ARGV[i]
  tokens[#tokens + 1] = ARGV[i + 1]
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
