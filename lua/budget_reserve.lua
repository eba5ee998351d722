#!lua
--[[ budget_reserve: check every spend counter of one job and reserve in all of them, or in none.
KEYS[1]  reservation  hash  counter key -> "<metric> <amount> <expire_at_ms>" (the record)
KEYS[2]  open         zset  reservation id -> 0, every unsettled reservation
KEYS[3]  counter      hash  used, held; KEYS[3..] repeat once per counter (no key twice,
                            none the same as KEYS[1] or KEYS[2])
ARGV[1]  id           str   reservation id "<queue>|<job>|<attempt>|<token>"
ARGV[2]  ttl_ms       int   >= 1; how long the record lives unsettled
ARGV[3]  urgent       int   1: the soft-hold band may be used; 0: it may not
ARGV[4]  metric       str   runs | usd | tokens; ARGV[4..8] repeat once per counter, KEYS order
ARGV[5]  amount       int   reserved now: runs 1, usd micro-dollars, tokens 0 (recorded after)
ARGV[6]  cap          int   the cap (0: nothing may run)
ARGV[7]  soft         int   where the soft-hold band starts, <= cap (cap: no band)
ARGV[8]  expire_at_ms int   when the counter key expires: its window's end plus a margin
Returns  {1} reserved in every counter
         {2} already reserved under this id: nothing changed (a retried call)
         {0, n, kind, used, held} counter n (1-based) says no, nothing changed; kind is
         'cap' (used + held + amount over the cap, or used + held already at it; tokens:
         used at the cap) or 'soft' (the same against soft, for a job that is not urgent).
         Any counter's 'cap' comes before any counter's 'soft'.
Errors   -4 bad input (counts, an empty id, a number that is not an integer in range, an
         unknown metric, tokens with an amount, soft above cap, a key twice, KEYS[1] or
         KEYS[2] among the counters); nothing is written
]]

local function int_arg(text, low)  -- plain digits (a sign only for -1): no 1e3, 0x10, ' 5'
  if #text > 16 or not string.find(text, '^%-?%d+$') then return nil end
  local n = tonumber(text)
  if n >= low and n < 2 ^ 53 then return n end
  return nil
end

local METRICS = {runs = true, usd = true, tokens = true}
local n = #KEYS - 2
if n < 1 or #ARGV ~= 3 + 5 * n then return -4 end
local ttl, urgent = int_arg(ARGV[2], 1), int_arg(ARGV[3], 0)
if ARGV[1] == '' or not ttl or not urgent or urgent > 1 then return -4 end

if KEYS[1] == KEYS[2] then return -4 end
local counters, seen = {}, {[KEYS[1]] = true, [KEYS[2]] = true}
for i = 1, n do
  local at = 3 + 5 * (i - 1)
  local c = {metric = ARGV[at + 1], amount = int_arg(ARGV[at + 2], 0),
             cap = int_arg(ARGV[at + 3], 0), soft = int_arg(ARGV[at + 4], 0),
             expire_at = int_arg(ARGV[at + 5], 1)}
  if not METRICS[c.metric] or not c.amount or not c.cap or not c.soft or not c.expire_at
      or c.soft > c.cap or (c.metric == 'tokens' and c.amount ~= 0) or seen[KEYS[i + 2]] then
    return -4
  end
  seen[KEYS[i + 2]] = true
  counters[i] = c
end

if redis.call('EXISTS', KEYS[1]) == 1 then return {2} end

-- every counter is read before anything is written: all or nothing
for i, c in ipairs(counters) do
  local got = redis.call('HMGET', KEYS[i + 2], 'used', 'held')
  c.used, c.held = tonumber(got[1]) or 0, tonumber(got[2]) or 0
end
local function over(c, limit)
  local taken = c.used + c.held
  return taken >= limit or taken + c.amount > limit
end
for i, c in ipairs(counters) do
  if over(c, c.cap) then return {0, i, 'cap', c.used, c.held} end
end
if urgent == 0 then
  for i, c in ipairs(counters) do
    if over(c, c.soft) then return {0, i, 'soft', c.used, c.held} end
  end
end

for i, c in ipairs(counters) do
  if c.amount > 0 then
    redis.call('HINCRBY', KEYS[i + 2], 'held', c.amount)
    redis.call('PEXPIREAT', KEYS[i + 2], c.expire_at)
  end
  redis.call('HSET', KEYS[1], KEYS[i + 2], c.metric .. ' ' .. c.amount .. ' ' .. c.expire_at)
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return {1}
