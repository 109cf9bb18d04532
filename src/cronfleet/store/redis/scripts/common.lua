-- Shared by every cronfleet script (prepended when the script is loaded).
-- ARGV[1]: the key prefix; ARGV[2]: the time in ms, or '' for the server clock (TIME).
-- Keys: P{job}:s state hash, P{job}:n token counter, P{job}:c slot -> token,
-- P{job}:t token -> "slot|instance|claimed_at", P{job}:cs claimed slots (zset),
-- P{job}:f token -> run id, P{job}:d "slot|reason" -> run id, P{job}:k skip slots (zset),
-- P{job}:r run ids (zset by id), P{job}:rs run ids by slot; global: Pjobs, Pleased,
-- Poverrides, Prunid, Pr:<id>, Pids, Pslot, Pids:<status>, Pslot:<status>, Popen.
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
local function split3(s)
  local a, b, c = string.match(s, '^([^|]*)|(.*)|([^|]*)$')
  return a, b, c
end
local function ensure(j)
  if redis.call('HSETNX', jk(j, 's'), 'c', NOW) == 1 then
    redis.call('SADD', gk('jobs'), j)
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
  redis.call('SADD', gk('jobs'), j)
  return tok
end
local function release(j, tok)
  if tok == '' or tok == false then return end
  local sk = jk(j, 's')
  if redis.call('HGET', sk, 'lt') == tostring(tok) then
    redis.call('HDEL', sk, 'h', 'lt', 'lu')
    redis.call('ZREM', gk('leased'), j)
  end
end
-- an expired lease whose holder never wrote its run (claim still there, no run by token)
local function lost_of(j)
  local v = redis.call('HMGET', jk(j, 's'), 'h', 'lt', 'lu')
  if not v[2] or not v[3] or tonumber(v[3]) > NOW then return false end
  local c = redis.call('HGET', jk(j, 't'), v[2])
  if not c or redis.call('HEXISTS', jk(j, 'f'), v[2]) == 1 then return false end
  local slot, _, claimed = split3(c)
  return {j, v[2], v[1] or '', slot, claimed}
end
-- the run indexes
local OPEN = {running = true, pending = true}
local function index_status(id, slot, old, new, dl)
  if old then
    redis.call('ZREM', gk('ids:' .. old), id)
    redis.call('ZREM', gk('slot:' .. old), pad(id))
  end
  redis.call('ZADD', gk('ids:' .. new), id, id)
  redis.call('ZADD', gk('slot:' .. new), slot, pad(id))
  if OPEN[new] and dl then
    redis.call('ZADD', gk('open'), dl, id)
  else
    redis.call('ZREM', gk('open'), id)
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
    redis.call('SADD', gk('jobs'), j)
  end
  local expired = not v[3] or tonumber(v[3]) <= NOW
  if v[2] and v[3] and expired then
    local c = redis.call('HGET', jk(j, 't'), v[2])
    if c and redis.call('HEXISTS', jk(j, 'f'), v[2]) == 0 then
      local slot, _, claimed = split3(c)
      insert_row(kept_row(j, v[2], v[1], slot, claimed), nil)
    end
  end
  if not v[1] or expired then
    local until_ = NOW + tonumber(hold)
    if tok == '' then
      redis.call('HDEL', sk, 'lt')
      redis.call('HSET', sk, 'h', inst, 'lu', until_)
    else
      redis.call('HSET', sk, 'h', inst, 'lt', tok, 'lu', until_)
    end
    redis.call('ZADD', gk('leased'), until_, j)
    return 1, false
  end
  return 0, v[1]
end
