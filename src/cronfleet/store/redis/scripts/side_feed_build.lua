-- Index definitions written before the change feed existed (store/redis/side.py): each id
-- of ARGV[3..] in the feed ARGV[1] (sorted set) scored by the version in its JSON in the
-- hash ARGV[2]. A score only rises: a definition written meanwhile keeps its newer one.
local n = 0
for i = 3, #ARGV do
  local raw = redis.call('HGET', ARGV[2], ARGV[i])
  if raw then
    local v = tonumber(cjson.decode(raw).version)
    local cur = redis.call('ZSCORE', ARGV[1], ARGV[i])
    if not cur or tonumber(cur) < v then
      redis.call('ZADD', ARGV[1], v, ARGV[i])
      n = n + 1
    end
  end
end
return n
