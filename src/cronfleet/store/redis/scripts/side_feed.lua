-- The catalog's change feed on Redis (store/redis/side.py), read in one atomic step.
-- ARGV: the feed (sorted set: id scored by its version), the definitions (hash: id ->
-- JSON), the version after which to read, the most to read.
-- Answers the JSON of each definition whose version is above, by version.
local ids = redis.call('ZRANGE', ARGV[1], '(' .. ARGV[3], '+inf', 'BYSCORE', 'LIMIT', 0,
                       tonumber(ARGV[4]))
if #ids == 0 then return {} end
return redis.call('HMGET', ARGV[2], unpack(ids))
