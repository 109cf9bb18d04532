-- Reading the ledger. ARGV: P, now, what, ...
--   'get', ids...                      the rows of these ids
--   'last', jobs...                    each job's newest run
--   'list', limit, status, job, before_id       newest first by id
--   'find', limit, cursor slot, cursor id, status, job, instance, since, until, job ids...
--                                      newest first by (slot, id)
local what = ARGV[3]
local out = {}
local function row(id) return redis.call('HGETALL', gk('r:' .. id)) end
if what == 'get' then
  for i = 4, #ARGV do
    local r = row(ARGV[i])
    if #r > 0 then out[#out + 1] = r end
  end
  return out
end
if what == 'last' then
  for i = 4, #ARGV do
    local id = redis.call('ZREVRANGE', jk(ARGV[i], 'r'), 0, 0)[1]
    if id then out[#out + 1] = row(id) end
  end
  return out
end
local CHUNK = 500
if what == 'list' then
  local limit, st, j, before = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
  local key = j ~= '' and jk(j, 'r') or (st ~= '' and gk('ids:' .. st) or gk('ids'))
  local filter = j ~= '' and st ~= ''
  local max = before ~= '' and ('(' .. before) or '+inf'
  local off = 0
  while #out < limit do
    local ids = redis.call('ZREVRANGEBYSCORE', key, max, '-inf', 'LIMIT', off, CHUNK)
    for _, id in ipairs(ids) do
      if not filter or redis.call('HGET', gk('r:' .. id), 'st') == st then
        out[#out + 1] = row(id)
        if #out >= limit then break end
      end
    end
    if #ids < CHUNK then break end
    off = off + CHUNK
  end
  return out
end
-- find
local limit, cs, cid = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local st, j, inst, since, until_ = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local only = nil
if #ARGV >= 12 and ARGV[12] == '1' then
  only = {}
  for i = 13, #ARGV do only[ARGV[i]] = true end
end
local key = j ~= '' and jk(j, 'rs') or (st ~= '' and gk('slot:' .. st) or gk('slot'))
local max = '+inf'
if until_ ~= '' then max = '(' .. until_ end
if cs ~= '' and (until_ == '' or tonumber(cs) < tonumber(until_)) then max = cs end
local min = since ~= '' and since or '-inf'
local bound = cs ~= '' and pad(cid) or nil
local off = 0
while #out < limit do
  local got = redis.call('ZREVRANGEBYSCORE', key, max, min, 'WITHSCORES', 'LIMIT', off, CHUNK)
  for i = 1, #got, 2 do
    local member, score = got[i], got[i + 1]
    if not bound or score ~= cs or member < bound then
      local id = tonumber(member)
      local v = redis.call('HMGET', gk('r:' .. id), 'j', 'st', 'in')
      if (st == '' or v[2] == st) and (j == '' or v[1] == j)
          and (inst == '' or v[3] == inst) and (not only or only[v[1]]) then
        out[#out + 1] = row(id)
        if #out >= limit then break end
      end
    end
  end
  if #got < CHUNK * 2 then break end
  off = off + CHUNK
end
return out
