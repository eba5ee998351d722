#!lua
--[[ job_handback: give claims back to wait at once, counting neither a stall nor an attempt.
KEYS[1]  active    zset  id -> lock deadline ms
KEYS[2]  lock      hash  id -> lock token
KEYS[3]  wait      list  ready ids (a claim handed back goes to the head)
KEYS[4]  marker    zset  wake-up marker
KEYS[5]  cancel    hash  id -> cancel request expiry ms
KEYS[6]  attempts  hash  id -> attempts spent
KEYS[7]  runs      hash  run id "<id>#<attempt>" -> run record JSON (fleet mirror)
ARGV[1]  id        str   job id; ARGV[1..2] repeat once per claim, 1 to 1000
ARGV[2]  token     str   lock token of the claim given back, "<host>:<n>"
Returns  {{handed back ids}, {recorded ids}}, each in the order given. A claim whose lock no
         longer holds its token (finished, swept, re-claimed) is left as it is. So is a claim
         whose attempt has a run record written by this very claim (or by an older release,
         which named no claim): its run ended but its finish did not land, and handed back it
         would run again; its lock lapses, and after that stall the settled-record gate ends
         it as recorded. An earlier claim's record of the attempt (a run stopped and handed
         back before this one) does not hold the claim
Errors   -4 bad call (key count, argument count, a field out of shape); nothing is written
]]
if #KEYS ~= 7 or #ARGV < 2 or #ARGV % 2 ~= 0 or #ARGV > 2000 then return -4 end
local ids, tokens = {}, {}
for i = 1, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if #id > 128 or #token > 90 or not string.find(id, '^[%w][%w%._%-]*$')
      or not string.find(token, '^[%w%._%-]+:%d+$') then
    return -4
  end
  ids[#ids + 1] = id
  tokens[#tokens + 1] = token
end

-- whether a stored record was written by the claim holding `token`, or names no claim
local function by(raw, token)
  local ok, record = pcall(cjson.decode, raw)
  local claim = ok and type(record) == 'table' and record.claim
  return type(claim) ~= 'string' or claim == '' or claim == token
end

local locks = redis.call('HMGET', KEYS[2], unpack(ids))
local spent = redis.call('HMGET', KEYS[6], unpack(ids))
local back, recorded, seen = {}, {}, {}
for i, id in ipairs(ids) do
  if locks[i] == tokens[i] and not seen[id] then
    seen[id] = true
    local run_id = id .. '#' .. ((tonumber(spent[i]) or 0) + 1)
    local record = redis.call('HGET', KEYS[7], run_id)
    if record and by(record, tokens[i]) then
      recorded[#recorded + 1] = id
    else
      back[#back + 1] = id
    end
  end
end
if #back == 0 then return {back, recorded} end

redis.call('ZREM', KEYS[1], unpack(back))
redis.call('HDEL', KEYS[2], unpack(back))
-- a cancel request was for the run that ended here; the sweep drops it the same way
redis.call('HDEL', KEYS[5], unpack(back))
-- reversed so the first given ends up first
for i = #back, 1, -1 do redis.call('LPUSH', KEYS[3], back[i]) end
redis.call('ZADD', KEYS[4], 0, 'w')
return {back, recorded}
