-- Orphans. ARGV: P, now, instance, reason, error, log before, no holder, log after.
-- Marks open runs past their deadline whose lease is not live 'interrupted' (their ids),
-- then releases expired leases whose holder never wrote its run (5 fields each); expired
-- lanes 1..N-1 (max_instances > 1) are deleted, those never written reported the same way.
local reason, err, before, nohold, after = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local reaped = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', gk('open'), '-inf', '(' .. NOW)) do
  local key = gk('r:' .. id)
  local v = redis.call('HMGET', key, 'j', 'st', 'tk', 'in', 'lg', 'sl')
  if not v[1] or not OPEN[v[2]] then
    redis.call('ZREM', gk('open'), id)
  else
    local s = redis.call('HMGET', jk(v[1], 's'), 'lt', 'lu')
    local live = v[3] and s[1] == v[3] and tonumber(s[2] or 0) > NOW
    if not live and v[3] and s[1] ~= v[3] then  -- not lane 0's: a lane 1..N-1's?
      local lane, _, u = lane_of(v[1], v[3])
      live = lane and u > NOW
    end
    if not live then
      local logs = v[5] and cjson.decode(v[5]) or {}
      logs[#logs + 1] = before .. (v[4] or nohold) .. after
      redis.call('HSET', key, 'st', 'interrupted', 'rs', reason, 'fa', NOW, 'e', err,
        'lg', cjson.encode(logs))
      redis.call('HDEL', key, 'dl')
      index_status(id, v[6], v[2], 'interrupted', false)
      reaped[#reaped + 1] = id
    end
  end
end
local lost = {}
for _, j in ipairs(redis.call('ZRANGEBYSCORE', gk('leased'), '-inf', NOW)) do
  local l = lost_of(j)
  if l then
    release(j, l[2])
    lost[#lost + 1] = l
  else
    local lu = redis.call('HGET', jk(j, 's'), 'lu')
    if not lu or tonumber(lu) <= NOW then redis.call('ZREM', gk('leased'), j) end
  end
end
for _, j in ipairs(redis.call('ZRANGEBYSCORE', gk('lanes'), '-inf', NOW)) do
  local lk = jk(j, 'l')
  local all = redis.call('HGETALL', lk)
  for i = 1, #all, 2 do
    local tok, h, u = split3(all[i + 1])
    if tonumber(u) <= NOW then
      local l = lost_claim(j, tok, h)
      if l then lost[#lost + 1] = l end
      redis.call('HDEL', lk, all[i])
    end
  end
  lanes_index(j)
end
return {NOW, reaped, lost}
