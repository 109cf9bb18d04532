-- The side tables' one atomic step (store/redis/side.py): compare and set.
-- ARGV[1]: JSON {"check": [[key, field, expected], ...], "set": [[key, field, value], ...],
--               "publish": [channel, message] or absent}
-- field false/null: a plain string key (GET / SET); expected false/null: the value must
-- be absent. A set [key, member, score, "zadd"] adds member to the sorted set key with
-- that score (the catalog's change feed, a team's live ids); [key, member, score, "zrem"]
-- removes it. Every check must hold, else nothing is written and 0 is answered (the caller
-- reads again and retries); then every set is written, the message published, 1 answered.
local op = cjson.decode(ARGV[1])
local function absent(v) return v == nil or v == cjson.null or v == false end
for _, c in ipairs(op.check or {}) do
  local cur
  if absent(c[2]) then cur = redis.call('GET', c[1]) else cur = redis.call('HGET', c[1], c[2]) end
  if absent(c[3]) then
    if cur then return 0 end
  elseif cur ~= c[3] then
    return 0
  end
end
for _, s in ipairs(op.set or {}) do
  if s[4] == 'zadd' then redis.call('ZADD', s[1], s[3], s[2])
  elseif s[4] == 'zrem' then redis.call('ZREM', s[1], s[2])
  elseif absent(s[2]) then redis.call('SET', s[1], s[3]) else redis.call('HSET', s[1], s[2], s[3]) end
end
if op.publish and op.publish ~= cjson.null then
  redis.call('PUBLISH', op.publish[1], op.publish[2])
end
return 1
