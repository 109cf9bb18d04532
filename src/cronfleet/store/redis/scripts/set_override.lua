-- ARGV: P, now, job, enabled ('1' | '0' | '' clear), by, note, until ('' none)
local j = ARGV[3]
ensure(j)
local sk = jk(j, 's')
redis.call('HDEL', sk, 'o', 'ob', 'on', 'ou')
if ARGV[4] ~= '' then
  redis.call('HSET', sk, 'o', ARGV[4])
  redis.call('SADD', gk('overrides'), j)
else
  redis.call('SREM', gk('overrides'), j)
end
redis.call('HSET', sk, 'oa', NOW)
if ARGV[5] ~= '' then redis.call('HSET', sk, 'ob', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', sk, 'on', ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', sk, 'ou', ARGV[7]) end
redis.call('PUBLISH', gk('events'), 'override')
return state_row(j)
