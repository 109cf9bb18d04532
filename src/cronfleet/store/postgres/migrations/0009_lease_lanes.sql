-- cronfleet schema v9 for PostgreSQL: lease lanes (max_instances = N). Lane 0 of a job's
-- lease stays in job_state (lease_holder/token/until): a job with max_instances = 1 never
-- has a row here. Lanes 1..N-1 are rows of this table, created the first time a run needs
-- one. Every writer of a job's lanes first locks the job's job_state row (as every lease
-- writer does, in job_id order), so the lanes of one job are taken one transaction at a
-- time. Applied inside the store's schema.

CREATE TABLE IF NOT EXISTS lease_lanes (
    job_id       TEXT        NOT NULL,
    lane         INTEGER     NOT NULL,  -- 1..max_instances-1
    lease_holder TEXT,
    lease_token  BIGINT,
    lease_until  TIMESTAMPTZ,
    PRIMARY KEY (job_id, lane)
);
-- what release / renew / reap / lost-instance breaking look up: the held lanes
CREATE INDEX IF NOT EXISTS lease_lanes_token ON lease_lanes (lease_token)
    WHERE lease_token IS NOT NULL;
