-- Leases for pending runs (Store.start). ARGV: P, now, instance, count, then 4 per lease:
-- job, token ('' none), hold ms, lanes (the job's max_instances); then run ids to read.
-- Reply: now, then 2 per lease (taken, holder), then the rows asked for.
local inst = ARGV[3]
local n = tonumber(ARGV[4])
local out = {NOW}
for i = 0, n - 1 do
  local b = 5 + i * 4
  local taken, holder = take_lease(ARGV[b], ARGV[b + 1], ARGV[b + 2], inst)
  if taken == 0 and ARGV[b + 3] ~= '1' then
    taken, holder = take_lane(ARGV[b], ARGV[b + 1], ARGV[b + 2], inst, tonumber(ARGV[b + 3]),
      holder)
  end
  out[#out + 1] = taken
  out[#out + 1] = holder
end
for i = 5 + n * 4, #ARGV do
  out[#out + 1] = redis.call('HGETALL', gk('r:' .. ARGV[i]))
end
return out
