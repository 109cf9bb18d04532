-- Undo early claims not started. ARGV: P, now, then (job, slot ms, token) triples. A
-- claim whose token has a run row is kept (a survivor resolved it: instance_lost).
local deleted = 0
for i = 3, #ARGV, 3 do
  local j, slot, tok = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HGET', jk(j, 'c'), slot) == tok
      and redis.call('HEXISTS', jk(j, 'f'), tok) == 0 then
    drop_claim(j, tok)
    deleted = deleted + 1
  end
  release(j, tok)
end
return deleted
