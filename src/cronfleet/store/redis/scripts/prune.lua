-- The retention rule (store/base.py RETENTION_RULE). ARGV: P, now, claims cut-off ms,
-- runs cut-off ms, runs kept per job. Reply: {claims deleted, runs deleted}.
local ccut, rcut, per_job = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local nc, nr = 0, 0
for _, j in ipairs(redis.call('SMEMBERS', gk('jobs'))) do
  local newest = redis.call('ZREVRANGE', jk(j, 'cs'), 0, 0)[1]
  local t = redis.call('HGETALL', jk(j, 't'))
  for i = 1, #t, 2 do
    local slot, _, claimed = split3(t[i + 1])
    if tonumber(claimed) < ccut and (slot == '' or slot ~= newest) then
      drop_claim(j, t[i])
      nc = nc + 1
    end
  end
  local kept = 0
  local d = redis.call('HVALS', jk(j, 'd'))
  for _, id in ipairs(d) do
    if tonumber(id) > kept then kept = tonumber(id) end
  end
  local count = 0
  for _, id in ipairs(redis.call('ZREVRANGE', jk(j, 'r'), 0, -1)) do
    count = count + 1
    local v = redis.call('HMGET', gk('r:' .. id), 'st', 'fa')
    if v[1] and not OPEN[v[1]] and tonumber(id) ~= kept then
      if (v[2] and tonumber(v[2]) < rcut) or count > per_job then
        unindex(id)
        nr = nr + 1
      end
    end
  end
end
return {nc, nr}
