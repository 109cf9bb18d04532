-- cronfleet schema v15 for SQLite: the catalog's buckets (cronfleet/shares.py). Each
-- definition keeps its bucket, a hash of its id, so that a process reads only the
-- definitions of the buckets it owns, in (bucket, id) keyset pages through job_defs_share.
-- Writers set it; the definitions stored before are given theirs here (cronfleet_bucket:
-- the Python function the store registers on its connection).
ALTER TABLE job_defs ADD COLUMN bucket INTEGER;
UPDATE job_defs SET bucket = cronfleet_bucket(id) WHERE bucket IS NULL;
CREATE INDEX IF NOT EXISTS job_defs_share ON job_defs (bucket, id) WHERE deleted_at IS NULL;
