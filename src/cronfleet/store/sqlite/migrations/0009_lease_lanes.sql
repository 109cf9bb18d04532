-- cronfleet schema v9 for SQLite: lease lanes (max_instances = N). Lane 0 of a job's lease
-- stays in job_state (lease_holder/token/until): a job with max_instances = 1 never has a
-- row here. Lanes 1..N-1 are rows of this table, created the first time a run needs one.
-- Times are integer milliseconds since the Unix epoch (UTC), by the store's clock.

CREATE TABLE IF NOT EXISTS lease_lanes (
    job_id       TEXT    NOT NULL,
    lane         INTEGER NOT NULL,     -- 1..max_instances-1
    lease_holder TEXT,
    lease_token  INTEGER,
    lease_until  INTEGER,
    PRIMARY KEY (job_id, lane)
);
-- what release / renew / reap / lost-instance breaking look up: the held lanes
CREATE INDEX IF NOT EXISTS lease_lanes_token ON lease_lanes (lease_token)
    WHERE lease_token IS NOT NULL;
