-- The fleet's instances (InstanceStore), judged by the server's clock. Pinst: a hash,
-- instance id -> JSON {h host, p pid, r role, v version, sa started, hb heartbeat,
-- la lost at, lb lost by, pl plans} (times in ms). ARGV: P, now, what, ...
--   'beat', id, host, pid, role, version, ttl ms, plans   register / refresh; reply JSON
--        {now, lost (0/1), lost at, lost by, [[id, its plans, live 1/0]...]} (every
--        instance not declared lost: live, or stale when its heartbeat is older than ttl)
--   'list', ttl ms                                  reply JSON {now, [[id, row]...]}
--   'leave', id
--   'break', me, ttl ms, reason, error before, error after, log before, log after
--        declare lost every other instance whose heartbeat is older than ttl; its open
--        runs become interrupted (the error and log lines name it: before .. id ..
--        after), a leased claim it never wrote a run for gets that row, its leases are
--        released (lane 0 and lanes 1..N-1). Reply JSON {now, [[id, row]...] declared,
--        [run ids]}.
local what = ARGV[3]
local key = gk('inst')
local function rows()
  local out = {}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do out[#out + 1] = {all[i], cjson.decode(all[i + 1])} end
  return out
end
-- the instances not declared lost: [id, plans, 1 when live (beat at or after cut) else 0]
local function unlost(cut)
  local out = {}
  for _, r in ipairs(rows()) do
    if not r[2].la then out[#out + 1] = {r[1], r[2].pl or '', r[2].hb >= cut and 1 or 0} end
  end
  table.sort(out, function(a, b) return a[1] < b[1] end)
  return out
end
if what == 'beat' then
  local id, ttl = ARGV[4], tonumber(ARGV[9])
  local raw = redis.call('HGET', key, id)
  local row = raw and cjson.decode(raw) or nil
  local lost, lat, lby = 0, false, false
  if not row or row.la then
    if row then lost, lat, lby = 1, row.la, row.lb or false end
    row = {h = ARGV[5], p = tonumber(ARGV[6]), r = ARGV[7], v = ARGV[8], sa = NOW}
  end
  row.hb = NOW
  row.pl = ARGV[10]
  redis.call('HSET', key, id, cjson.encode(row))
  local ids = unlost(NOW - ttl)
  return cjson.encode({NOW, lost, lat, lby, #ids > 0 and ids or cjson.decode('[]')})
end
if what == 'list' then
  return cjson.encode({NOW, rows()})
end
if what == 'leave' then
  return redis.call('HDEL', key, ARGV[4])
end
-- break
local me, ttl, reason = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local eb, ea, lb, la = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local cut = NOW - ttl
local declared, lost = {}, {}
for _, r in ipairs(rows()) do
  local id, row = r[1], r[2]
  if id ~= me and not row.la and row.hb < cut then
    row.la, row.lb = NOW, me
    redis.call('HSET', key, id, cjson.encode(row))
    declared[#declared + 1] = {id, row}
    lost[id] = true
  end
end
local ids = {}
if #declared == 0 then return cjson.encode({NOW, cjson.decode('[]'), cjson.decode('[]')}) end
for _, st in ipairs({'running', 'pending'}) do
  for _, id in ipairs(redis.call('ZRANGE', gk('ids:' .. st), 0, -1)) do
    local rk = gk('r:' .. id)
    local v = redis.call('HMGET', rk, 'in', 'lg', 'sl', 'st')
    if v[1] and lost[v[1]] and v[4] == st then
      local logs = v[2] and cjson.decode(v[2]) or {}
      logs[#logs + 1] = lb .. v[1] .. la
      redis.call('HSET', rk, 'st', 'interrupted', 'rs', reason, 'fa', NOW,
        'e', eb .. v[1] .. ea, 'lg', cjson.encode(logs))
      redis.call('HDEL', rk, 'dl')
      index_status(id, v[3], st, 'interrupted', false)
      ids[#ids + 1] = tonumber(id)
    end
  end
end
-- a lease of a lost holder: the interrupted row of a claim it never wrote a run for
local function broken(j, holder, tok)
  local l = lost_claim(j, tok, holder)
  if not l then return end
  local slot, claimed = l[4], l[5]
  local row = {
    j = j, sl = slot ~= '' and slot or claimed, tb = 'schedule', st = 'interrupted',
    ma = slot == '' and '1' or '0', ca = '0', re = '0', at = '1',
    lg = cjson.encode({lb .. holder .. la}), ['in'] = holder, tk = tok, rs = reason,
    cl = claimed, fa = tostring(NOW), e = eb .. holder .. ea,
  }
  ids[#ids + 1] = insert_row(row, nil)
end
for _, j in ipairs(redis.call('ZRANGE', gk('leased'), 0, -1)) do
  local v = redis.call('HMGET', jk(j, 's'), 'h', 'lt')
  if v[1] and lost[v[1]] and v[2] then
    broken(j, v[1], v[2])
    release(j, v[2])
  end
end
for _, j in ipairs(redis.call('ZRANGE', gk('lanes'), 0, -1)) do  -- lanes 1..N-1
  local lk = jk(j, 'l')
  local all = redis.call('HGETALL', lk)
  local changed = false
  for i = 1, #all, 2 do
    local tok, h = split3(all[i + 1])
    if lost[h] then
      broken(j, h, tok)
      redis.call('HDEL', lk, all[i])
      changed = true
    end
  end
  if changed then lanes_index(j) end
end
return cjson.encode({NOW, declared, #ids > 0 and ids or cjson.decode('[]')})
