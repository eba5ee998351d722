#!lua
--[[ job_withdraw: take back a delayed job nobody has claimed yet, as if never enqueued.
KEYS[1]  delayed    zset  id -> due ms
KEYS[2]  data       hash  id -> job JSON
KEYS[3]  queued     hash  id -> enqueue instant ms
KEYS[4]  defer      hash  id -> latest defer record JSON
KEYS[5]  attempts   hash  id -> attempts spent
KEYS[6]  dedup      hash  dedup key -> "<window end ms> <id>"
KEYS[7]  dedup_exp  zset  dedup key -> when to look at the entry again
ARGV[1]  id         str   job id: 1-128 of A-Z a-z 0-9 . _ -, a letter or digit first
ARGV[2]  dedup      str   the job's dedup key, "" for none; at most 1024 bytes
Returns  1 withdrawn (its id and dedup key are free again); 0 left as it is: not delayed, or
         claimed before (it has a defer record or a spent attempt)
Errors   -4 bad call (key count, argument count, a field out of shape); nothing is written
A trigger withdraws its pending occurrence this way when the trigger is removed, disabled,
paused or changed, so the same occurrence can be minted again under the same id.
]]
if #KEYS ~= 7 or #ARGV ~= 2 then return -4 end
local id, key = ARGV[1], ARGV[2]
if #id > 128 or not string.find(id, '^[%w][%w%._%-]*$') or #key > 1024 then return -4 end

if not redis.call('ZSCORE', KEYS[1], id) then return 0 end
if redis.call('HEXISTS', KEYS[4], id) == 1 or redis.call('HEXISTS', KEYS[5], id) == 1 then
  return 0
end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
if key ~= '' then
  local entry = redis.call('HGET', KEYS[6], key)
  if entry and string.match(entry, '^%d+ (.+)$') == id then
    redis.call('HDEL', KEYS[6], key)
    redis.call('ZREM', KEYS[7], key)
  end
end
return 1
