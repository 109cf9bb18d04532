-- Write run rows and release leases, atomically. ARGV: P, now, a JSON array of rows
-- (objects of strings; 'id' set: update; a token already written: update that row; 'dd'
-- set: a claim-less skip, which takes its slot's claim, and is not written when the slot
-- is claimed already), then (job, token) pairs to release.
-- Reply: one JSON array, per row id and how (1 inserted, 2 updated, 0 not written, 3 late:
-- the row already holds another final outcome, nothing written). A row with 'la' = the
-- stored status: only its result and logs are written (a late result attached).
BATCH = true  -- common.lua: the global indexes written once, by flush()
local UPDATED = {'st', 'rs', 'sa', 'fa', 'dl', 'r', 'e', 'lg'}
local rows = cjson.decode(ARGV[3])
local out = {}
local function update(id, row)
  local key = gk('r:' .. id)
  local old = redis.call('HMGET', key, 'st', 'sl')
  if not old[1] then return 0 end
  if row.la then  -- a late result attached (only when the row still holds `la`'s status)
    if old[1] ~= row.la then return 0 end
    redis.call('HSET', key, 'r', row.r or 'null', 'lg', row.lg or '[]')
    return 2
  end
  -- the fence (ledger.is_late): a final outcome is never overwritten by another one;
  -- the caller attaches it as a late result
  if not OPEN[old[1]] and old[1] ~= row.st then return 3 end
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
    elseif dk and (redis.call('HEXISTS', jk(j, 'd'), dk) == 1
                   or redis.call('HEXISTS', jk(j, 'c'), row.sl) == 1) then
      id, how = 0, 0  -- a skip whose slot is claimed (a run, an earlier skip): no row
    else
      if dk then new_claim(j, row.sl, row['in'] or '') end  -- a skip takes the slot's claim
      id = insert_row(row, dk)
      how = 1
    end
  end
  out[#out + 1] = id or 0
  out[#out + 1] = how
end
for i = 4, #ARGV, 2 do release(ARGV[i], ARGV[i + 1]) end
flush()
return cjson.encode(out)
