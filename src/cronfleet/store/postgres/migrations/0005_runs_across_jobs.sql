-- cronfleet schema v5 for PostgreSQL: runs listed across jobs (Store.find_runs), newest
-- first by (slot, id). A status filter ("failed since yesterday", "running now") walks
-- runs_status_slot backwards from the cursor and stops at the page's last row; without one,
-- runs_slot. A job filter keeps runs_job_id (a job holds at most runs_per_job rows).
CREATE INDEX IF NOT EXISTS runs_status_slot ON runs (status, slot, id);
CREATE INDEX IF NOT EXISTS runs_slot ON runs (slot, id);

-- a manual run's parameters (JSON object, reaching the handler as ctx.params) and who
-- forced it while the job was paused or disabled (NULL: not forced); no default, so adding
-- them rewrites nothing
ALTER TABLE runs ADD COLUMN IF NOT EXISTS params jsonb;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS forced_by text;
