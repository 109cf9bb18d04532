-- ARGV: P, now, mode ('ensure' | 'read' | 'overrides'), job ids...
-- ensure: create missing state rows (announced), then read; overrides: every job with one
local mode = ARGV[3]
local out = {}
if mode == 'overrides' then
  for _, j in ipairs(redis.call('SMEMBERS', gk('overrides'))) do
    local r = state_row(j)
    if r then out[#out + 1] = r end
  end
  return out
end
local created = 0
for i = 4, #ARGV do
  if mode == 'ensure' and ensure(ARGV[i]) then created = created + 1 end
  local r = state_row(ARGV[i])
  if r then out[#out + 1] = r end
end
if created > 0 then redis.call('PUBLISH', gk('events'), 'jobs') end
return out
