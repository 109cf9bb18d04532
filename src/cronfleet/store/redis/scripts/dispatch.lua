-- Claims and leases of one batch, atomically. ARGV: P, now, instance, then one JSON array
-- of strings, 6 per item: kind (s slot, e early, t token, n none, r recovery), job,
-- slot ms, lease ('1'/'0'), hold ms, reclaimed token. Reply (one JSON array): now, then 5
-- per item (won, token, lease taken, holder, busy), then the lost runs found under
-- expired leases (5 each). JSON both ways: a burst of 10,000 is one string each way, not
-- 60,000 arguments and 50,000 reply elements to encode and parse one by one.
local inst = ARGV[3]
local A = cjson.decode(ARGV[4])
local n = #A / 6
local res = {}
for i = 0, n - 1 do
  local b = 1 + i * 6
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
local lost = {}
local out = {NOW}
for i = 0, n - 1 do
  local b = 1 + i * 6
  local j = A[b + 1]
  local r = res[i + 1]
  local taken, holder, busy = 0, false, 0
  if r[1] == 1 and A[b + 3] == '1' then
    taken, holder = take_lease(j, r[2] and tostring(r[2]) or '', A[b + 4], inst, lost)
    if taken == 0 and A[b] == 'e' then
      drop_claim(j, r[2])
      r[1], r[2], busy = 0, false, 1
    end
  end
  out[#out + 1] = r[1]
  out[#out + 1] = r[2]
  out[#out + 1] = taken
  out[#out + 1] = holder
  out[#out + 1] = busy
end
for _, x in ipairs(lost) do out[#out + 1] = x end
return cjson.encode(out)
