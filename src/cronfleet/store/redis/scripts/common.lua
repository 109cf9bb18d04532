-- Shared by every cronfleet script (prepended when the script is loaded).
-- ARGV[1]: the key prefix; ARGV[2]: the time in ms, or '' for the server clock (TIME).
-- Keys: P{job}:s state hash, P{job}:n token counter, P{job}:c slot -> token,
-- P{job}:t token -> "slot|instance|claimed_at", P{job}:cs claimed slots (zset),
-- P{job}:f token -> run id, P{job}:d "slot|reason" -> run id, P{job}:k skip slots (zset),
-- P{job}:r run ids (zset by id), P{job}:rs run ids by slot, P{job}:l lease lanes 1..N-1
-- (max_instances = N > 1 only: lane -> "token|holder|until"); global: Pjobs, Pleased,
-- Planes (jobs with a lane held, by their lanes' earliest expiry), Poverrides, Prunid,
-- Pr:<id>, Pids, Pslot, Pids:<status>, Pslot:<status>, Popen.
local P = ARGV[1]
local NOW
if ARGV[2] ~= '' then
  NOW = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function jk(j, s) return P .. '{' .. j .. '}:' .. s end
local function gk(s) return P .. s end
local function pad(id) return string.format('%015.0f', tonumber(id)) end
-- Writes to the global sorted sets (the run indexes, `leased`) and to `jobs`, batched in
-- the scripts that set BATCH (dispatch, put_runs: thousands of rows a call): one ZREM,
-- ZADD or SADD per key when the script calls flush() before it returns, instead of one
-- per row (each redis.call costs the interpreter about as much as the command). The
-- last write of a (key, member) wins, as when applied in order; those scripts never read
-- these keys. Members are strings as redis.call would make them (tostring).
local BATCH = false
local ZW, SW = {}, {}
local function pend(w, key, member, value)  -- a pending write: w[key][member] = value
  local t = w[key]
  if not t then t = {}; w[key] = t end
  t[tostring(member)] = value
end
local function zadd(key, score, member)
  if not BATCH then return redis.call('ZADD', key, score, member) end
  pend(ZW, key, member, score)
end
local function zrem(key, member)
  if not BATCH then return redis.call('ZREM', key, member) end
  pend(ZW, key, member, false)
end
local function sadd(key, member)
  if not BATCH then return redis.call('SADD', key, member) end
  pend(SW, key, member, true)
end
local CHUNK = 4000  -- arguments per call, even (Lua's unpack stops near 8,000)
local function call_chunked(cmd, key, args)
  for i = 1, #args, CHUNK do
    redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
  end
end
local function flush()
  for key, t in pairs(ZW) do
    local add, rem = {}, {}
    for m, score in pairs(t) do
      if score then
        add[#add + 1] = score
        add[#add + 1] = m
      else
        rem[#rem + 1] = m
      end
    end
    call_chunked('ZREM', key, rem)
    call_chunked('ZADD', key, add)
  end
  for key, t in pairs(SW) do
    local add = {}
    for m in pairs(t) do add[#add + 1] = m end
    call_chunked('SADD', key, add)
  end
  ZW, SW = {}, {}
end
local function split3(s)
  local a, b, c = string.match(s, '^([^|]*)|(.*)|([^|]*)$')
  return a, b, c
end
local function ensure(j)
  if redis.call('HSETNX', jk(j, 's'), 'c', NOW) == 1 then
    sadd(gk('jobs'), j)
    return true
  end
  return false
end
local function state_row(j)
  local v = redis.call('HMGET', jk(j, 's'), 'o', 'ob', 'oa', 'on', 'ou', 'h', 'lt', 'lu', 'c')
  if not v[9] then return false end
  local cs = redis.call('ZREVRANGE', jk(j, 'cs'), 0, 0, 'WITHSCORES')
  local ks = redis.call('ZREVRANGE', jk(j, 'k'), 0, 0, 'WITHSCORES')
  return {j, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], cs[2] or false, ks[2] or false, v[9]}
end
local function drop_claim(j, tok)
  local c = redis.call('HGET', jk(j, 't'), tok)
  if not c then return false end
  redis.call('HDEL', jk(j, 't'), tok)
  local slot = split3(c)
  if slot ~= '' and redis.call('HGET', jk(j, 'c'), slot) == tostring(tok) then
    redis.call('HDEL', jk(j, 'c'), slot)
    redis.call('ZREM', jk(j, 'cs'), slot)
  end
  return true
end
local function new_claim(j, slot, inst)
  local tok = redis.call('INCR', jk(j, 'n'))
  redis.call('HSET', jk(j, 't'), tok, slot .. '|' .. inst .. '|' .. NOW)
  if slot ~= '' then
    redis.call('HSET', jk(j, 'c'), slot, tok)
    redis.call('ZADD', jk(j, 'cs'), slot, slot)
  end
  sadd(gk('jobs'), j)
  return tok
end
-- Lease lanes (max_instances = N > 1). Lane 0 is the state hash's lease (h, lt, lu), as
-- for every job; lanes 1..N-1 are the fields of P{job}:l, written only when a run of such
-- a job finds lane 0 busy (a job with N = 1 never has that key, nor a Planes entry). A
-- lane's field is deleted when it is released, broken, or reaped once expired.
-- Planes scores each job with a lane field by the earliest `until` among them (reap.lua
-- reads the expired ones, instances.lua's break every one).
local function lanes_index(j)
  local all = redis.call('HGETALL', jk(j, 'l'))
  local first = false
  for i = 2, #all, 2 do
    local _, _, u = split3(all[i])
    u = tonumber(u)
    if not first or u < first then first = u end
  end
  if first then
    redis.call('ZADD', gk('lanes'), first, j)
  else
    redis.call('ZREM', gk('lanes'), j)
  end
end
-- the lane field (1..N-1) that token `tok` holds, and its holder and until; or false
local function lane_of(j, tok)
  local all = redis.call('HGETALL', jk(j, 'l'))
  for i = 1, #all, 2 do
    local t, h, u = split3(all[i + 1])
    if t == tok then return all[i], h, tonumber(u) end
  end
  return false
end
local function release(j, tok)
  if tok == '' or tok == false then return end
  local sk = jk(j, 's')
  if redis.call('HGET', sk, 'lt') == tostring(tok) then
    redis.call('HDEL', sk, 'h', 'lt', 'lu')
    zrem(gk('leased'), j)
    return
  end
  local lane = lane_of(j, tostring(tok))  -- not lane 0: a lane 1..N-1 (max_instances > 1)
  if lane then
    redis.call('HDEL', jk(j, 'l'), lane)
    lanes_index(j)
  end
end
-- a lease (any lane) whose holder never wrote its run: its claim is still there and no
-- run carries its token; {job, token, holder, slot, claimed_at} or false
local function lost_claim(j, tok, holder)
  if not tok or tok == '' then return false end
  local c = redis.call('HGET', jk(j, 't'), tok)
  if not c or redis.call('HEXISTS', jk(j, 'f'), tok) == 1 then return false end
  local slot, _, claimed = split3(c)
  return {j, tok, holder or '', slot, claimed}
end
-- an expired lease (lane 0) whose holder never wrote its run
local function lost_of(j)
  local v = redis.call('HMGET', jk(j, 's'), 'h', 'lt', 'lu')
  if not v[2] or not v[3] or tonumber(v[3]) > NOW then return false end
  return lost_claim(j, v[2], v[1])
end
-- the run indexes
local OPEN = {running = true, pending = true}
local function index_status(id, slot, old, new, dl)
  local padded = pad(id)
  if old then
    zrem(gk('ids:' .. old), id)
    zrem(gk('slot:' .. old), padded)
  end
  zadd(gk('ids:' .. new), id, id)
  zadd(gk('slot:' .. new), slot, padded)
  if OPEN[new] and dl then
    zadd(gk('open'), dl, id)
  else
    zrem(gk('open'), id)
  end
end
local function unindex(id)
  local key = gk('r:' .. id)
  local v = redis.call('HMGET', key, 'j', 'st', 'tk', 'sl', 'dd')
  local j = v[1]
  if not j then return end
  redis.call('ZREM', gk('ids'), id)
  redis.call('ZREM', gk('slot'), pad(id))
  redis.call('ZREM', gk('ids:' .. v[2]), id)
  redis.call('ZREM', gk('slot:' .. v[2]), pad(id))
  redis.call('ZREM', gk('open'), id)
  redis.call('ZREM', jk(j, 'r'), id)
  redis.call('ZREM', jk(j, 'rs'), pad(id))
  if v[3] and redis.call('HGET', jk(j, 'f'), v[3]) == tostring(id) then
    redis.call('HDEL', jk(j, 'f'), v[3])
  end
  if v[5] then
    local dk = v[4] .. '|' .. v[5]
    if redis.call('HGET', jk(j, 'd'), dk) == tostring(id) then
      redis.call('HDEL', jk(j, 'd'), dk)
      redis.call('ZREM', jk(j, 'k'), dk)
    end
  end
  redis.call('DEL', key)
end
-- insert a run row (a table of strings; `dk` its dedupe key or nil) and index it; its id
local function insert_row(row, dk)
  local j = row.j
  local id = redis.call('INCR', gk('runid'))
  row.id = tostring(id)
  local args = {}
  for k, v in pairs(row) do
    args[#args + 1] = k
    args[#args + 1] = v
  end
  redis.call('HSET', gk('r:' .. id), unpack(args))
  local padded = pad(id)
  zadd(gk('ids'), id, id)
  zadd(gk('slot'), row.sl, padded)
  redis.call('ZADD', jk(j, 'r'), id, id)
  redis.call('ZADD', jk(j, 'rs'), row.sl, padded)
  index_status(id, row.sl, false, row.st, row.dl)
  if row.tk then redis.call('HSET', jk(j, 'f'), row.tk, id) end
  if dk then
    redis.call('HSET', jk(j, 'd'), dk, id)
    redis.call('ZADD', jk(j, 'k'), row.sl, dk)
  end
  return id
end
-- ledger.kept_lost_run as the run hash's fields (store.py run_fields)
local function kept_row(j, tok, holder, slot, claimed)
  local overdue = tostring(NOW - 1)
  if claimed == '' then claimed = overdue end
  local row = {
    j = j, sl = slot ~= '' and slot or claimed, tb = 'schedule', st = 'running',
    ma = slot == '' and '1' or '0', ca = '0', re = '0', at = '1', lg = '[]',
    tk = tostring(tok), cl = claimed, dl = overdue,
  }
  if holder and holder ~= '' then row['in'] = holder end
  return row
end
-- take the job's lease for hold ms: 1 or (0, holder). Before an expired lease is taken
-- over, what it proves is kept in the same script (ledger.kept_lost_run): the dead holder's
-- unwritten run, open with its deadline passed, for the reaper to mark interrupted.
-- (one HMGET per job on the hot path: the state row, the lease and the lost-run check)
local function take_lease(j, tok, hold, inst)
  local sk = jk(j, 's')
  local v = redis.call('HMGET', sk, 'h', 'lt', 'lu', 'c')
  if not v[4] then
    redis.call('HSET', sk, 'c', NOW)
    sadd(gk('jobs'), j)
  end
  local expired = not v[3] or tonumber(v[3]) <= NOW
  if v[2] and v[3] and expired then
    local l = lost_claim(j, v[2], v[1])
    if l then insert_row(kept_row(l[1], l[2], l[3], l[4], l[5]), nil) end
  end
  if not v[1] or expired then
    local until_ = NOW + tonumber(hold)
    if tok == '' then
      redis.call('HDEL', sk, 'lt')
      redis.call('HSET', sk, 'h', inst, 'lu', until_)
    else
      redis.call('HSET', sk, 'h', inst, 'lt', tok, 'lu', until_)
    end
    zadd(gk('leased'), until_, j)
    return 1, false
  end
  return 0, v[1]
end
-- lane 0 was busy (take_lease said so, naming `holder0`): take the lowest free or expired
-- lane 1..n-1 for hold ms (an expired one's unwritten run kept first, as take_lease does):
-- 1 or (0, every lane's holder, sorted, once each, ', '-joined: ledger.busy_log's list)
local function take_lane(j, tok, hold, inst, n, holder0)
  local lk = jk(j, 'l')
  local all = redis.call('HGETALL', lk)
  local held = {}
  for i = 1, #all, 2 do held[tonumber(all[i])] = all[i + 1] end
  for lane = 1, n - 1 do
    local v = held[lane]
    local t, h, u
    if v then t, h, u = split3(v) end
    if not v or tonumber(u) <= NOW then
      if v then
        local l = lost_claim(j, t, h)
        if l then insert_row(kept_row(l[1], l[2], l[3], l[4], l[5]), nil) end
      end
      redis.call('HSET', lk, lane, tok .. '|' .. inst .. '|' .. (NOW + tonumber(hold)))
      lanes_index(j)
      return 1, false
    end
  end
  local seen, names = {}, {}
  local function add(h)
    if h and h ~= '' and not seen[h] then
      seen[h] = true
      names[#names + 1] = h
    end
  end
  add(holder0)
  for lane = 1, n - 1 do
    local _, h = split3(held[lane])
    add(h)
  end
  table.sort(names)
  return 0, table.concat(names, ', ')
end
