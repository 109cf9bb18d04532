-- cronfleet schema v3 for SQLite: the instances of the fleet (one row per running
-- scheduler process) and the index the fence of a late result reads.
-- Times are integer milliseconds since the Unix epoch (UTC), by the store's clock.

CREATE TABLE IF NOT EXISTS instances (
    instance_id  TEXT PRIMARY KEY,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    role         TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    lost_at      INTEGER,              -- set by the survivor that broke its leases
    lost_by      TEXT
) WITHOUT ROWID;

-- a run row by its fencing token (one terminal row per slot: a late result is attached
-- to the row the token already has, never inserted as a second one)
CREATE INDEX IF NOT EXISTS runs_token ON runs (fencing_token) WHERE fencing_token IS NOT NULL;
