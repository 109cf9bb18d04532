-- ARGV: P, now, mode ('ensure' | 'read' | 'overrides'), a JSON array of job ids
-- ensure: create missing state rows (announced), then read; overrides: every job with one.
-- Reply: one JSON array of rows (100,000 rows are one string, not 1.2 million elements).
-- A row with nothing but its creation time (no override, lease, claim or run: every job
-- at a first start-up) is sent short, {job, created}: the client builds it without
-- parsing nine empty fields (store.py, _state).
local function compact(r)
  for i = 2, 11 do
    if r[i] then return r end
  end
  return {r[1], r[12]}
end
local mode = ARGV[3]
local out = {}
if mode == 'overrides' then
  for _, j in ipairs(redis.call('SMEMBERS', gk('overrides'))) do
    local r = state_row(j)
    if r then out[#out + 1] = r end
  end
  return cjson.encode(out)
end
local created = 0
for _, j in ipairs(cjson.decode(ARGV[4])) do
  if mode == 'ensure' and ensure(j) then created = created + 1 end
  local r = state_row(j)
  if r then out[#out + 1] = compact(r) end
end
if created > 0 then redis.call('PUBLISH', gk('events'), 'jobs') end
return cjson.encode(out)
