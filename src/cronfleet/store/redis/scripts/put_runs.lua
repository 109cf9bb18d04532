-- Write run rows and release leases, atomically. ARGV: P, now, a JSON array of rows
-- (objects of strings; 'id' set: update; a token already written: update that row; 'dd'
-- set: a skip written once per (job, slot, reason)), then (job, token) pairs to release.
-- Reply: one JSON array, per row id and how (1 inserted, 2 updated, 0 not written).
local UPDATED = {'st', 'rs', 'sa', 'fa', 'dl', 'r', 'e', 'lg'}
local rows = cjson.decode(ARGV[3])
local out = {}
local function update(id, row)
  local key = gk('r:' .. id)
  local old = redis.call('HMGET', key, 'st', 'sl')
  if not old[1] then return 0 end
  for _, f in ipairs(UPDATED) do
    if row[f] then redis.call('HSET', key, f, row[f]) else redis.call('HDEL', key, f) end
  end
  index_status(id, old[2], old[1], row.st, row.dl)
  return 2
end
for i = 1, #rows do
  local row = rows[i]
  local j = row.j
  local id = row.id and tonumber(row.id) or nil
  local how = 0
  if id then
    how = update(id, row)
  else
    local fenced = row.tk and redis.call('HGET', jk(j, 'f'), row.tk)
    local dk = row.dd and (row.sl .. '|' .. row.dd)
    if fenced then
      id = tonumber(fenced)
      how = update(id, row)
    elseif dk and redis.call('HEXISTS', jk(j, 'd'), dk) == 1 then
      id, how = 0, 0
    else
      id = redis.call('INCR', gk('runid'))
      row.id = tostring(id)
      local args = {}
      for k, v in pairs(row) do
        args[#args + 1] = k
        args[#args + 1] = v
      end
      redis.call('HSET', gk('r:' .. id), unpack(args))
      redis.call('ZADD', gk('ids'), id, id)
      redis.call('ZADD', gk('slot'), row.sl, pad(id))
      redis.call('ZADD', jk(j, 'r'), id, id)
      redis.call('ZADD', jk(j, 'rs'), row.sl, pad(id))
      index_status(id, row.sl, false, row.st, row.dl)
      if row.tk then redis.call('HSET', jk(j, 'f'), row.tk, id) end
      if dk then
        redis.call('HSET', jk(j, 'd'), dk, id)
        redis.call('ZADD', jk(j, 'k'), row.sl, dk)
      end
      how = 1
    end
  end
  out[#out + 1] = id or 0
  out[#out + 1] = how
end
for i = 4, #ARGV, 2 do release(ARGV[i], ARGV[i + 1]) end
return cjson.encode(out)
