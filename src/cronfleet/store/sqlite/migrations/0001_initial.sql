-- cronfleet schema v1 for SQLite. Times are integer milliseconds since the Unix epoch (UTC).

CREATE TABLE claims (
    token       INTEGER PRIMARY KEY AUTOINCREMENT,  -- the fencing token: only ever grows
    job_id      TEXT    NOT NULL,
    slot        INTEGER,                            -- NULL for manual runs (token only)
    instance_id TEXT    NOT NULL,
    claimed_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX claims_job_slot ON claims (job_id, slot);

CREATE TABLE job_state (
    job_id           TEXT PRIMARY KEY,
    enabled_override INTEGER,           -- 1 forced on, 0 paused, NULL declared value
    override_by      TEXT,
    override_at      INTEGER,
    override_note    TEXT,
    override_until   INTEGER,
    lease_holder     TEXT,
    lease_token      INTEGER,
    lease_until      INTEGER,
    created_at       INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX job_state_overrides ON job_state (job_id) WHERE enabled_override IS NOT NULL;
CREATE INDEX job_state_leases ON job_state (lease_until) WHERE lease_token IS NOT NULL;

CREATE TABLE runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        TEXT    NOT NULL,
    slot          INTEGER NOT NULL,
    triggered_by  TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    reason        TEXT,
    instance_id   TEXT,
    fencing_token INTEGER,
    manual        INTEGER NOT NULL DEFAULT 0,
    is_catchup    INTEGER NOT NULL DEFAULT 0,
    is_recovery   INTEGER NOT NULL DEFAULT 0,
    attempt       INTEGER NOT NULL DEFAULT 1,
    claimed_at    INTEGER,
    started_at    INTEGER,
    finished_at   INTEGER,
    deadline      INTEGER,
    result        TEXT,
    error         TEXT,
    logs          TEXT,
    dedupe        TEXT                  -- set on claim-less skips: one per (job, slot, reason)
);
CREATE INDEX runs_job_id ON runs (job_id, id);
CREATE UNIQUE INDEX runs_dedupe ON runs (job_id, slot, dedupe) WHERE dedupe IS NOT NULL;
CREATE INDEX runs_open ON runs (deadline) WHERE status IN ('running', 'pending');
