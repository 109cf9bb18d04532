-- cronfleet schema v2 for SQLite: the side tables join the numbered migrations.
-- Before v2 each was created by its own connection with CREATE TABLE IF NOT EXISTS (same
-- definitions as below), so IF NOT EXISTS here upgrades such a file in place and keeps its
-- rows. Times are integer milliseconds since the Unix epoch (UTC).

-- the vault's ciphertexts (never a plaintext)
CREATE TABLE IF NOT EXISTS secrets (
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    key_id     TEXT    NOT NULL,
    nonce      BLOB    NOT NULL,
    ciphertext BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;

-- API tokens: SHA-256 digests only
CREATE TABLE IF NOT EXISTS api_tokens (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, team TEXT NOT NULL, role TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL, created_by TEXT,
    revoked_at BIGINT, last_used_at BIGINT);

CREATE TABLE IF NOT EXISTS audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at BIGINT NOT NULL, team TEXT NOT NULL,
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
    job_id TEXT PRIMARY KEY, last_outcome TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    successes INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
    last_duration REAL, last_run_at INTEGER) WITHOUT ROWID;
