-- cronfleet schema v10 for SQLite: one job's runs newest first by (slot, id) (the runs
-- page and GET /api/runs of one job, Store.find_runs with a job filter) read from
-- runs_job_slot and stop at the page's last row; without it SQLite sorted the job's rows,
-- and with a status filter walked runs_status_slot over every job's runs of that status.
CREATE INDEX IF NOT EXISTS runs_job_slot ON runs (job_id, slot, id);
