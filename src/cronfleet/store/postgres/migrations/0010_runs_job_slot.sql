-- cronfleet schema v10 for PostgreSQL: one job's runs newest first by (slot, id) (the runs
-- page and GET /api/runs of one job, Store.find_runs with a job filter), as on SQLite.
CREATE INDEX IF NOT EXISTS runs_job_slot ON runs (job_id, slot, id);
