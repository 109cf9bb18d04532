-- cronfleet schema v15 for PostgreSQL: the catalog's buckets (cronfleet/shares.py). Each
-- definition keeps its bucket, a hash of its id, so that a process reads only the
-- definitions of the buckets it owns, in (bucket, id) keyset pages through job_defs_share.
-- Writers set it; the definitions stored before are given theirs here, with the same hash
-- computed in SQL (the first 32 bits of md5(id), low 10 bits).
ALTER TABLE job_defs ADD COLUMN IF NOT EXISTS bucket integer;
UPDATE job_defs SET bucket = (('x' || substr(md5(id), 1, 8))::bit(32)::integer & 1023)
WHERE bucket IS NULL;
CREATE INDEX IF NOT EXISTS job_defs_share ON job_defs (bucket, id) WHERE deleted_at IS NULL;
