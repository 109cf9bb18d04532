-- cronfleet schema v8 for PostgreSQL: the job registry (which instance declares which job,
-- with what spec) and the requests one process sends another through the store (remote
-- trigger, announced with NOTIFY). Applied inside the store's schema.

CREATE TABLE IF NOT EXISTS job_registry (
    job_id       TEXT        NOT NULL,
    instance_id  TEXT        NOT NULL,
    team         TEXT        NOT NULL,
    source       TEXT        NOT NULL,  -- code, config, plugin, api
    digest       TEXT        NOT NULL,  -- sha-256 of the spec's canonical JSON
    spec         JSONB       NOT NULL,  -- kind, schedule, zone, policies, description, config
    declared_at  TIMESTAMPTZ NOT NULL,  -- when this instance first declared this spec
    seen_at      TIMESTAMPTZ NOT NULL,  -- when this instance last said it still does
    PRIMARY KEY (job_id, instance_id)
);
CREATE INDEX IF NOT EXISTS job_registry_instance ON job_registry (instance_id);

CREATE TABLE IF NOT EXISTS requests (
    id           BIGSERIAL   PRIMARY KEY,
    kind         TEXT        NOT NULL,  -- trigger
    job_id       TEXT        NOT NULL,
    target       TEXT,                  -- an instance id, or NULL: any live declarer
    payload      JSONB       NOT NULL,  -- params, force, ...
    requested_by TEXT        NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL,
    taken_by     TEXT,
    taken_at     TIMESTAMPTZ,
    answered_at  TIMESTAMPTZ,
    run_id       BIGINT,
    error        TEXT
);
CREATE INDEX IF NOT EXISTS requests_open ON requests (job_id) WHERE taken_by IS NULL;
