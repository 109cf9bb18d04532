-- Give back the claims of dispatch calls whose answer never arrived (the connection died
-- after the server ran the script): the scheduler took those batches as failed and claims
-- their slots again, which must find them free, and their leases must not hold the jobs
-- until they expire. ARGV: P, now, then (job, slot ms, instance) triples. A slot's claim
-- is given back (claim dropped, its lease released) only when that instance made it and
-- no run row carries its token: a claim whose row was written with it (a skip, a pending
-- or catch-up run), or that a survivor resolved, stays. Reply: the claims given back.
local given = 0
for i = 3, #ARGV, 3 do
  local j, slot, inst = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local tok = redis.call('HGET', jk(j, 'c'), slot)
  if tok and redis.call('HEXISTS', jk(j, 'f'), tok) == 0 then
    local c = redis.call('HGET', jk(j, 't'), tok)
    if c then
      local _, owner = split3(c)
      if owner == inst then
        drop_claim(j, tok)
        release(j, tok)
        given = given + 1
      end
    end
  end
end
return given
