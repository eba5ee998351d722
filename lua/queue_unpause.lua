#!lua
--[[ queue_unpause: lift a queue's pause only if it is still the very pause the caller saw.
KEYS[1]  paused  str   present while the queue is paused
KEYS[2]  marker  zset  wake-up marker
ARGV[1]  mark    str   the value the caller read from `paused` (a fleet pause's copy), 1-255 bytes
Returns  1 lifted (and the daemons woken); 0 the queue is not paused, or paused otherwise
         (a newer pause, or one set by hand): nothing written
Errors   -4 bad call (key count, argument count, an empty or over-long mark); nothing is
         written
]]
if #KEYS ~= 2 or #ARGV ~= 1 or ARGV[1] == '' or #ARGV[1] > 255 then return -4 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[2], 0, 'w')
return 1
