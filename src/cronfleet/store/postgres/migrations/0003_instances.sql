-- cronfleet schema v3 for PostgreSQL: the instances of the fleet (one row per running
-- scheduler process), times by the database clock. Applied inside the store's schema.

CREATE TABLE IF NOT EXISTS instances (
    instance_id  TEXT        PRIMARY KEY,
    host         TEXT        NOT NULL,
    pid          INTEGER     NOT NULL,
    role         TEXT        NOT NULL,
    version      TEXT        NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL,
    lost_at      TIMESTAMPTZ,          -- set by the survivor that broke its leases
    lost_by      TEXT
);
