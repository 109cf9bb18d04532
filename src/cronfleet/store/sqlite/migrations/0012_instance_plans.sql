-- cronfleet schema v12 for SQLite: each instance's heartbeat says which jobs it plans (a
-- digest of their ids, runtime/ownership.py): the live instances that plan the same jobs
-- divide them, one owner a job. NULL (a process of the previous version during a rolling
-- upgrade) matches nobody: such an instance plans every job, as before.
ALTER TABLE instances ADD COLUMN plans TEXT;
