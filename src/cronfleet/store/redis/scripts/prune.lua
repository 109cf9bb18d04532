-- The retention rule (store/driver.py Retention), a bounded piece of it per call: a
-- ledger of millions of rows is never one long script holding the server.
-- ARGV: P, now, claims cut-off ms, runs cut-off ms, runs kept per job, the pass's cursor
-- (JSON, '' to begin), the most items (jobs, claims, runs) this call may examine.
-- Reply: {claims deleted, runs deleted, items examined, next cursor ('' when done)}.
-- The cursor: c the SSCAN cursor of the jobs set, q the jobs of its batch not yet done
-- (q[1] the current one), ph 'c' (claims), 'a' (runs past their age) or 'r' (runs past
-- the count) for q[1], h its HSCAN cursor, t claim fields read by HSCAN not yet
-- examined, k its oldest runs examined and kept in this phase.
-- Runs are examined oldest first by id, twice: the age cut first, then the runs left are
-- ranked (a newer run that finished long ago takes no place of the kept ones). A deleted
-- run leaves the set, so the next one always has exactly k older ones left.
local ccut, rcut, per_job = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local limit = tonumber(ARGV[7])
local st = ARGV[6] ~= '' and cjson.decode(ARGV[6]) or {c = '0', s = false, q = {}}
local nc, nr, work = 0, 0, 0
local function next_job()
  table.remove(st.q, 1)
  st.ph, st.h, st.t, st.k = 'c', '0', {}, 0
end
while work < limit do
  if #st.q == 0 then
    if st.s and st.c == '0' then
      return {nc, nr, work, ''}
    end
    local r = redis.call('SSCAN', gk('jobs'), st.c, 'COUNT', 100)
    work = work + 1
    st.c, st.s, st.q = r[1], true, r[2]
    st.ph, st.h, st.t, st.k = 'c', '0', {}, 0
  else
    local j = st.q[1]
    work = work + 1
    if st.ph == 'c' then
      if #st.t == 0 and st.h ~= 'end' then
        local r = redis.call('HSCAN', jk(j, 't'), st.h, 'COUNT', 100)
        st.h = r[1] == '0' and 'end' or r[1]
        st.t = r[2]
      end
      if #st.t == 0 then
        st.ph, st.k = 'a', 0
      else
        local newest = redis.call('ZREVRANGE', jk(j, 'cs'), 0, 0)[1]
        while #st.t > 0 and work < limit do
          local tok, val = st.t[1], st.t[2]
          table.remove(st.t, 1)
          table.remove(st.t, 1)
          work = work + 1
          local slot, _, claimed = split3(val)
          if tonumber(claimed) < ccut and (slot == '' or slot ~= newest) then
            if drop_claim(j, tok) then nc = nc + 1 end
          end
        end
      end
    else
      -- the newest claim-less skip (the watermark reads it: state_row's 'k')
      local kdk = redis.call('ZREVRANGE', jk(j, 'k'), 0, 0)[1]
      local kept = kdk and tonumber(redis.call('HGET', jk(j, 'd'), kdk)) or 0
      local total = redis.call('ZCARD', jk(j, 'r'))
      local ids = redis.call('ZRANGE', jk(j, 'r'), st.k, st.k + (limit - work))
      if #ids == 0 then
        if st.ph == 'a' then
          st.ph, st.k = 'r', 0
        else
          next_job()
        end
      else
        for _, id in ipairs(ids) do
          if work >= limit then break end
          work = work + 1
          local v = redis.call('HMGET', gk('r:' .. id), 'st', 'fa')
          local gone = false
          if v[1] and not OPEN[v[1]] and tonumber(id) ~= kept then
            if (st.ph == 'a' and v[2] and tonumber(v[2]) < rcut)
                or (st.ph == 'r' and total - st.k > per_job) then
              unindex(id)
              nr, total, gone = nr + 1, total - 1, true
            end
          end
          if not gone then st.k = st.k + 1 end
        end
      end
    end
  end
end
return {nc, nr, work, cjson.encode(st)}
