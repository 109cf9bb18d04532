-- cronfleet schema v11 for SQLite: each job's newest run (its id, slot, status, reason and
-- manual flag) in last_runs, kept by the triggers below on every write to runs, whoever
-- writes it (the store, a bulk import, a process of the previous version still running
-- during a rolling upgrade). The overview reads one short row per job instead of probing
-- runs_job_id and fetching a row of the ledger for each of 100,000 jobs
-- (Store.last_slot_runs, Store.last_runs).
CREATE TABLE IF NOT EXISTS last_runs (
    job_id  TEXT    PRIMARY KEY,
    run_id  INTEGER NOT NULL,
    slot    INTEGER NOT NULL,
    status  TEXT    NOT NULL,
    reason  TEXT,
    manual  INTEGER NOT NULL
) WITHOUT ROWID;

INSERT OR REPLACE INTO last_runs (job_id, run_id, slot, status, reason, manual)
SELECT job_id, id, slot, status, reason, manual FROM runs
WHERE id IN (SELECT max(id) FROM runs GROUP BY job_id);

-- a new run is its job's newest unless a newer one is there already
CREATE TRIGGER IF NOT EXISTS last_runs_insert AFTER INSERT ON runs
BEGIN
    INSERT INTO last_runs (job_id, run_id, slot, status, reason, manual)
    VALUES (NEW.job_id, NEW.id, NEW.slot, NEW.status, NEW.reason, NEW.manual)
    ON CONFLICT (job_id) DO UPDATE SET
        run_id = excluded.run_id, slot = excluded.slot, status = excluded.status,
        reason = excluded.reason, manual = excluded.manual
    WHERE excluded.run_id > last_runs.run_id;
END;

-- the newest run's verdict changes (pending -> running -> succeeded, a skip, a reap)
CREATE TRIGGER IF NOT EXISTS last_runs_update AFTER UPDATE OF status, reason, slot, manual
ON runs
BEGIN
    UPDATE last_runs SET slot = NEW.slot, status = NEW.status, reason = NEW.reason,
                         manual = NEW.manual
    WHERE job_id = NEW.job_id AND run_id = NEW.id;
END;

-- the newest run deleted (a job's ledger purged): the one before it, if any, is newest
CREATE TRIGGER IF NOT EXISTS last_runs_delete AFTER DELETE ON runs
WHEN OLD.id = (SELECT run_id FROM last_runs WHERE job_id = OLD.job_id)
BEGIN
    DELETE FROM last_runs WHERE job_id = OLD.job_id;
    INSERT INTO last_runs (job_id, run_id, slot, status, reason, manual)
    SELECT job_id, id, slot, status, reason, manual FROM runs
    WHERE job_id = OLD.job_id ORDER BY id DESC LIMIT 1;
END;
