-- The job registry and the requests between processes (RegistryStore), judged by the
-- server's clock. Keys:
--   Preg:insts            set of instance ids that have registry rows
--   Preg:<inst>           hash job id -> JSON {t team, s source, d digest, p spec, da declared at}
--   Preg:seen             hash instance id -> ms of its last publish or touch (seen_at of its rows)
--   Preqid                the request id counter
--   Preq:<id>             hash: k kind, j job, b requested by, p payload JSON, ra requested at,
--                         tg target, tb taken by, ta taken at, aa answered at, ri run id, e error
--   Preq:open             zset of untaken, unanswered request ids (score: id)
-- ARGV: P, now, what, ...
--   'publish', inst                 the instance's rows are current: touch (seen_at)
--   'put', inst, rows JSON [[job, team, source, digest, spec JSON]...]   a chunk of its rows
--                                   (new or changed ones written; declared_at kept for an
--                                   unchanged digest); reply the number written
--   'drop', inst, jobs JSON          rows it no longer declares (a chunk)
--   'ids', inst                      the job ids of its rows
--   'list'                          reply JSON {now, [[inst, seen, {job: row}]...], instance rows}
--   'submit', kind, job, by, payload JSON, target ('' none)        reply {id, now}
--   'open', inst                     [id, job, target ('' none), ...] of the untaken requests
--                                   meant for inst or for no instance in particular
--   'take', inst, ids JSON           take these if still untaken: each as its flat hash with its id
--   'answer', id, run id, error ('' none), only untaken (1/0)    reply 1 answered / 0
--   'note', id, payload JSON         reply 1 written / 0
--   'get', id                        the request's flat hash (empty: none)
local what = ARGV[3]
local OPEN = gk('req:open')
local function rk(id) return gk('req:' .. id) end

if what == 'publish' then
  redis.call('HSET', gk('reg:seen'), ARGV[4], NOW)
  return 0
end

if what == 'put' then
  -- one chunk at a time (the client sends REGISTRY_CHUNK rows a call): 100,000 rows in
  -- one script held the server for a second, every other process's claims waiting
  local inst = ARGV[4]
  local key = gk('reg:' .. inst)
  redis.call('SADD', gk('reg:insts'), inst)
  local n = 0
  for _, r in ipairs(cjson.decode(ARGV[5])) do
    local job = r[1]
    local cur = redis.call('HGET', key, job)
    local old = nil
    if cur then old = cjson.decode(cur) end
    if not old or old.d ~= r[4] or old.t ~= r[2] or old.s ~= r[3] then
      local da = NOW
      if old and old.d == r[4] then da = old.da end
      redis.call('HSET', key, job, cjson.encode({t = r[2], s = r[3], d = r[4], p = r[5], da = da}))
      n = n + 1
    end
  end
  return n
end

if what == 'drop' then
  local gone = cjson.decode(ARGV[5])
  if #gone == 0 then return 0 end
  return redis.call('HDEL', gk('reg:' .. ARGV[4]), unpack(gone))
end

if what == 'ids' then
  return redis.call('HKEYS', gk('reg:' .. ARGV[4]))
end

if what == 'list' then
  local out = {}
  for _, inst in ipairs(redis.call('SMEMBERS', gk('reg:insts'))) do
    local all = redis.call('HGETALL', gk('reg:' .. inst))
    if #all > 0 then
      local rows = {}
      for i = 1, #all, 2 do rows[#rows + 1] = {all[i], all[i + 1]} end
      out[#out + 1] = {inst, tonumber(redis.call('HGET', gk('reg:seen'), inst) or 0), rows}
    end
  end
  local insts = {}
  local all = redis.call('HGETALL', gk('inst'))
  for i = 1, #all, 2 do insts[#insts + 1] = {all[i], all[i + 1]} end
  if #out == 0 then out = cjson.decode('[]') end
  if #insts == 0 then insts = cjson.decode('[]') end
  return cjson.encode({NOW, out, insts})
end

if what == 'submit' then
  local id = redis.call('INCR', gk('reqid'))
  local f = {'k', ARGV[4], 'j', ARGV[5], 'b', ARGV[6], 'p', ARGV[7], 'ra', NOW}
  if ARGV[8] ~= '' then
    f[#f + 1] = 'tg'
    f[#f + 1] = ARGV[8]
  end
  redis.call('HSET', rk(id), unpack(f))
  redis.call('ZADD', OPEN, id, id)
  redis.call('PUBLISH', gk('events'), 'request')
  return {id, NOW}
end

if what == 'open' then
  -- the caller keeps those of the jobs it holds and takes them ('take'); rows taken or
  -- answered meanwhile leave the open set here
  local inst = ARGV[4]
  local out = {}
  for _, id in ipairs(redis.call('ZRANGE', OPEN, 0, -1)) do
    local v = redis.call('HMGET', rk(id), 'j', 'tg', 'tb', 'aa')
    if not v[1] or v[3] or v[4] then
      redis.call('ZREM', OPEN, id)
    elseif not v[2] or v[2] == inst then
      out[#out + 1] = id
      out[#out + 1] = v[1]
      out[#out + 1] = v[2] or ''
    end
  end
  return out
end

if what == 'take' then
  local inst = ARGV[4]
  local out = {}
  for _, id in ipairs(cjson.decode(ARGV[5])) do
    local v = redis.call('HMGET', rk(id), 'j', 'tb', 'aa')
    if v[1] and not v[2] and not v[3] then
      redis.call('HSET', rk(id), 'tb', inst, 'ta', NOW)
      redis.call('ZREM', OPEN, id)
      local flat = redis.call('HGETALL', rk(id))
      flat[#flat + 1] = 'id'
      flat[#flat + 1] = id
      out[#out + 1] = flat
    end
  end
  return out
end

if what == 'answer' then
  local key = rk(ARGV[4])
  local v = redis.call('HMGET', key, 'j', 'tb', 'aa')
  if not v[1] or v[3] then return 0 end
  if ARGV[7] == '1' and v[2] then return 0 end
  redis.call('HSET', key, 'aa', NOW)
  if ARGV[5] ~= '' then redis.call('HSET', key, 'ri', ARGV[5]) end
  if ARGV[6] ~= '' then redis.call('HSET', key, 'e', ARGV[6]) end
  redis.call('ZREM', OPEN, ARGV[4])
  return 1
end

if what == 'note' then
  local key = rk(ARGV[4])
  local v = redis.call('HMGET', key, 'j', 'tb', 'aa')
  if not v[1] or not v[2] or v[3] then return 0 end
  redis.call('HSET', key, 'p', ARGV[5])
  return 1
end

-- get
local flat = redis.call('HGETALL', rk(ARGV[4]))
if #flat > 0 then
  flat[#flat + 1] = 'id'
  flat[#flat + 1] = ARGV[4]
end
return flat
