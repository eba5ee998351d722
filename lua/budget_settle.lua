#!lua
--[[ budget_settle: close one reservation: charge what the run used, or give everything back.
KEYS[1]  reservation  hash  counter key -> "<metric> <amount> <expire_at_ms>" (the record)
KEYS[2]  open         zset  reservation id -> 0, every unsettled reservation
KEYS[3]  counter      hash  used, held; KEYS[3..] repeat: exactly the record's counters
ARGV[1]  id           str   reservation id, as reserved
ARGV[2]  mode         str   settle (the run happened) | refund (it never started)
ARGV[3]  usd          int   settle: micro-dollars the run reported; -1: charge the reserved amount
ARGV[4]  tokens       int   settle: tokens the run reported (0 when none)
Returns  1 closed now: held amounts released; settle also charges 1 run to each run counter,
         usd (or the reserved amount) to each dollar counter, tokens to each token counter
         0 already closed (or never reserved): nothing changed but dropping a stale open entry
Errors   -4 bad input (counts, mode, numbers, a key twice, KEYS other than the record's
         counters); nothing is written. All is checked before the first write, a record or
         none; with none, the counters cannot be matched to it, only checked distinct
The record is deleted in the same step that charges it, so a settle and a refund, or two
settles (the run's own and the sweep's), can never both charge: the second finds no record.
A counter whose window ended longer ago than its margin is written and removed at once.
]]

local function int_arg(text, low)  -- plain digits (a sign only for -1): no 1e3, 0x10, ' 5'
  if #text > 16 or not string.find(text, '^%-?%d+$') then return nil end
  local n = tonumber(text)
  if n >= low and n < 2 ^ 53 then return n end
  return nil
end

if #KEYS < 2 or #ARGV ~= 4 then return -4 end
local mode, usd, tokens = ARGV[2], int_arg(ARGV[3], -1), int_arg(ARGV[4], 0)
if ARGV[1] == '' or (mode ~= 'settle' and mode ~= 'refund') or not usd or not tokens then
  return -4
end
local seen = {}  -- no key twice: no counter that is the record or the open set
for _, key in ipairs(KEYS) do
  if seen[key] then return -4 end
  seen[key] = true
end

local flat = redis.call('HGETALL', KEYS[1])
if #flat == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
local record = {}
for i = 1, #flat, 2 do record[flat[i]] = flat[i + 1] end
if #KEYS - 2 ~= #flat / 2 then return -4 end
local counters = {}
for i = 3, #KEYS do
  local entry = record[KEYS[i]]
  if not entry then return -4 end
  local metric, amount, expire_at = string.match(entry, '^(%a+) (%d+) (%d+)$')
  if not metric then return -4 end
  counters[i] = {metric = metric, amount = tonumber(amount), expire_at = tonumber(expire_at)}
end

local settle = mode == 'settle'
for i = 3, #KEYS do
  local c = counters[i]
  local charge = 0
  if settle then
    charge = c.amount
    if c.metric == 'usd' and usd >= 0 then charge = usd end
    if c.metric == 'tokens' then charge = tokens end
  end
  if c.amount > 0 and redis.call('HINCRBY', KEYS[i], 'held', -c.amount) < 0 then
    redis.call('HSET', KEYS[i], 'held', 0)
  end
  if charge > 0 then redis.call('HINCRBY', KEYS[i], 'used', charge) end
  -- a window long gone: an expiry in the past removes what the lines above wrote
  if c.amount > 0 or charge > 0 then redis.call('PEXPIREAT', KEYS[i], c.expire_at) end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
