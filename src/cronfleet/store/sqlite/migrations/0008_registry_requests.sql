-- cronfleet schema v8 for SQLite: the job registry (which instance declares which job,
-- with what spec) and the requests one process sends another through the store (remote
-- trigger). Times are integer milliseconds since the Unix epoch (UTC), by the store's clock.

CREATE TABLE IF NOT EXISTS job_registry (
    job_id       TEXT    NOT NULL,
    instance_id  TEXT    NOT NULL,
    team         TEXT    NOT NULL,
    source       TEXT    NOT NULL,     -- code, config, plugin, api
    digest       TEXT    NOT NULL,     -- sha-256 of the spec's canonical JSON
    spec         TEXT    NOT NULL,     -- JSON: kind, schedule, zone, policies, description, config
    declared_at  INTEGER NOT NULL,     -- when this instance first declared this spec
    seen_at      INTEGER NOT NULL,     -- when this instance last said it still does
    PRIMARY KEY (job_id, instance_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_registry_instance ON job_registry (instance_id);

CREATE TABLE IF NOT EXISTS requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT    NOT NULL,     -- trigger
    job_id       TEXT    NOT NULL,
    target       TEXT,                 -- an instance id, or NULL: any live declarer
    payload      TEXT    NOT NULL,     -- JSON object (params, force, ...)
    requested_by TEXT    NOT NULL,
    requested_at INTEGER NOT NULL,
    taken_by     TEXT,
    taken_at     INTEGER,
    answered_at  INTEGER,
    run_id       INTEGER,
    error        TEXT
);
-- what an instance polls: the requests nobody took yet
CREATE INDEX IF NOT EXISTS requests_open ON requests (job_id) WHERE taken_by IS NULL;
