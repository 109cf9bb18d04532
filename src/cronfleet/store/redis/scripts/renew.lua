-- Extend leases still held (lane 0, else a lane 1..N-1 the token holds), and the deadline
-- of their running run. ARGV: P, now, then (job, token, hold ms) triples.
for i = 3, #ARGV, 3 do
  local j, tok = ARGV[i], ARGV[i + 1]
  local until_ = NOW + tonumber(ARGV[i + 2])
  if redis.call('HGET', jk(j, 's'), 'lt') == tok then
    redis.call('HSET', jk(j, 's'), 'lu', until_)
    redis.call('ZADD', gk('leased'), until_, j)
  else
    local lane, h = lane_of(j, tok)
    if lane then
      redis.call('HSET', jk(j, 'l'), lane, tok .. '|' .. h .. '|' .. until_)
      lanes_index(j)
    end
  end
  local id = redis.call('HGET', jk(j, 'f'), tok)
  if id and redis.call('HGET', gk('r:' .. id), 'st') == 'running' then
    redis.call('HSET', gk('r:' .. id), 'dl', until_)
    redis.call('ZADD', gk('open'), until_, id)
  end
end
return 0
