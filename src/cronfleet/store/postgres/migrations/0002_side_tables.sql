-- cronfleet schema v2 for PostgreSQL: the side tables join the numbered migrations.
-- Before v2 each was created by its own connection with CREATE TABLE IF NOT EXISTS (same
-- definitions as below), so IF NOT EXISTS here upgrades such a schema in place and keeps
-- its rows. Applied inside the store's schema (search_path is set to it).

-- the vault's ciphertexts (never a plaintext)
CREATE TABLE IF NOT EXISTS secrets (
    namespace  TEXT        NOT NULL,
    name       TEXT        NOT NULL,
    key_id     TEXT        NOT NULL,
    nonce      BYTEA       NOT NULL,
    ciphertext BYTEA       NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- API tokens: SHA-256 digests only; times are integer milliseconds (as before v2)
CREATE TABLE IF NOT EXISTS api_tokens (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, team TEXT NOT NULL, role TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL, created_by TEXT,
    revoked_at BIGINT, last_used_at BIGINT);

CREATE TABLE IF NOT EXISTS audit_log (
    id BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, team TEXT NOT NULL,
    actor TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL,
    details TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_log_team ON audit_log (team, id);

-- the catalog: jobs created over the API (deleted ones stay as tombstones)
CREATE TABLE IF NOT EXISTS job_defs (
    id TEXT PRIMARY KEY, team TEXT NOT NULL, spec TEXT NOT NULL,
    version BIGINT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL,
    created_by TEXT, updated_by TEXT, deleted_at BIGINT);
CREATE INDEX IF NOT EXISTS job_defs_version ON job_defs (version);

-- per-job health shared by the fleet
CREATE TABLE IF NOT EXISTS job_health (
    job_id text PRIMARY KEY, last_outcome text,
    consecutive_failures integer NOT NULL DEFAULT 0,
    successes bigint NOT NULL DEFAULT 0, failures bigint NOT NULL DEFAULT 0,
    last_duration double precision, last_run_at timestamptz);
