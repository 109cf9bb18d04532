-- One batch in one script: claims, leases and the run rows that must exist now, so a
-- process that dies after the call leaves rows (or a claim under its lease, which the
-- reaper resolves), never a claim nothing accounts for. ARGV: P, now, instance, then one
-- JSON array of strings, 8 per item: kind (s slot, e early, t token, n none, r recovery),
-- job, slot ms, lease ('0' none, '1' the job's lease, 'N' > 1: its N lanes, max_instances),
-- hold ms, reclaimed token, the row template to write when
-- the claim is won and its lease taken or not wanted, the one when the lease is busy
-- (indexes into the templates, '' none); then a JSON array of row templates (run hash
-- fields decided by ledger.dispatch_run in store.py, with placeholders: time '1' = now,
-- deadline '2' = now + hold, the holder mark in the logs = the lease's holder; job, slot
-- and token are set here). Reply (one JSON array): now, then 6 per item (won, token,
-- lease taken, holder, busy, id of the row written or 0). JSON both ways: a burst of
-- 10,000 is one string each way, not 80,000 arguments to encode and parse one by one.
BATCH = true  -- common.lua: the global indexes written once, by flush()
local inst = ARGV[3]
local A = cjson.decode(ARGV[4])
local T = cjson.decode(ARGV[5])
local HOLDER = ARGV[6]
local W = 8
local n = #A / W
local function fill(t, j, slot, tok, hold, holder)
  local row = {}
  for k, v in pairs(t) do row[k] = v end
  row.j, row.sl = j, slot
  if tok then row.tk = tostring(tok) end
  for _, f in ipairs({'cl', 'sa', 'fa'}) do
    if row[f] == '1' then row[f] = tostring(NOW) end
  end
  if row.dl == '2' then row.dl = tostring(NOW + tonumber(hold)) end
  if holder and row.lg then
    local a, b = string.find(row.lg, HOLDER, 1, true)
    if a then
      row.lg = string.sub(row.lg, 1, a - 1) .. string.sub(cjson.encode(holder), 2, -2)
        .. string.sub(row.lg, b + 1)
    end
  end
  return row
end
local res = {}
for i = 0, n - 1 do
  local b = 1 + i * W
  local kind, j, slot = A[b], A[b + 1], A[b + 2]
  local won, tok = 0, false
  if kind == 'r' then
    if drop_claim(j, A[b + 5]) then won, tok = 1, new_claim(j, slot, inst) end
  elseif kind == 's' or kind == 'e' then
    if redis.call('HEXISTS', jk(j, 'c'), slot) == 0 then won, tok = 1, new_claim(j, slot, inst) end
  elseif kind == 't' then
    won, tok = 1, new_claim(j, '', inst)
  else
    won = 1
  end
  res[i + 1] = {won, tok}
end
local out = {NOW}
for i = 0, n - 1 do
  local b = 1 + i * W
  local j, slot, hold = A[b + 1], A[b + 2], A[b + 4]
  local r = res[i + 1]
  local taken, holder, busy, id = 0, false, 0, 0
  local t = A[b + 6]
  local lease = A[b + 3]
  if r[1] == 1 and lease ~= '0' then
    local tok = r[2] and tostring(r[2]) or ''
    taken, holder = take_lease(j, tok, hold, inst)
    if taken == 0 and lease ~= '1' then
      taken, holder = take_lane(j, tok, hold, inst, tonumber(lease), holder)
    end
    if taken == 0 then
      if A[b] == 'e' then
        drop_claim(j, r[2])
        r[1], r[2], busy = 0, false, 1
      end
      t = A[b + 7]
    end
  end
  if r[1] == 1 and t ~= '' then
    id = insert_row(fill(T[tonumber(t)], j, slot, r[2], hold, holder), nil)
  end
  out[#out + 1] = r[1]
  out[#out + 1] = r[2]
  out[#out + 1] = taken
  out[#out + 1] = holder
  out[#out + 1] = busy
  out[#out + 1] = id
end
flush()
return cjson.encode(out)
