-- The side tables on SQLite: the vault's ciphertexts, job health, API tokens, the audit
-- log, the catalog of API jobs and the ids reserved by config or code jobs (migrations
-- v2, v4). The same names as postgres/side/queries.sql, run by store/sql_side.py on the
-- run store's connection. Placeholders: ? in order. Times: integer milliseconds.

-- name: secret_get
SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts
FROM secrets WHERE namespace = ? AND name = ?;

-- name: secret_exists
-- in the transaction of secret_put: whether it creates the row
SELECT 1 FROM secrets WHERE namespace = ? AND name = ?;

-- name: secret_put
-- create or replace (value and hosts)
INSERT INTO secrets (namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, name) DO UPDATE SET key_id = excluded.key_id,
    nonce = excluded.nonce, ciphertext = excluded.ciphertext,
    updated_at = excluded.updated_at, hosts = excluded.hosts;

-- name: secret_delete
DELETE FROM secrets WHERE namespace = ? AND name = ? RETURNING name;

-- name: secrets_all
SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts
FROM secrets ORDER BY namespace, name;

-- name: secrets_of_namespace
SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts
FROM secrets WHERE namespace = ? ORDER BY name;

-- name: health_ensure
INSERT INTO job_health (job_id) VALUES (?) ON CONFLICT DO NOTHING;

-- name: health_lock
-- inside BEGIN IMMEDIATE: one writer at a time, what is read stays true
SELECT job_id, last_outcome, consecutive_failures, successes, failures, last_duration,
    last_run_at
FROM job_health WHERE job_id = ?;

-- name: health_write
UPDATE job_health SET last_outcome = ?, consecutive_failures = ?, successes = ?,
    failures = ?, last_duration = ?, last_run_at = ?
WHERE job_id = ?;

-- name: health_get
SELECT job_id, last_outcome, consecutive_failures, successes, failures, last_duration,
    last_run_at
FROM job_health WHERE job_id = ?;

-- name: token_insert
INSERT INTO api_tokens (id, name, team, role, hash, created_at, created_by)
VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: token_by_hash
SELECT id, name, team, role, created_at, created_by, revoked_at, last_used_at
FROM api_tokens WHERE hash = ? AND revoked_at IS NULL;

-- name: token_touch
UPDATE api_tokens SET last_used_at = ? WHERE id = ?;

-- name: tokens_all
SELECT id, name, team, role, created_at, created_by, revoked_at, last_used_at
FROM api_tokens ORDER BY team, created_at, id;

-- name: tokens_of_team
SELECT id, name, team, role, created_at, created_by, revoked_at, last_used_at
FROM api_tokens WHERE team = ? ORDER BY created_at, id;

-- name: token_revoke
-- the token with this id, or every live token with this name
UPDATE api_tokens SET revoked_at = ? WHERE revoked_at IS NULL AND (id = ? OR name = ?)
RETURNING id, name, team, role, created_at, created_by, revoked_at, last_used_at;

-- name: audit_insert
INSERT INTO audit_log (at, team, actor, action, target, details) VALUES (?, ?, ?, ?, ?, ?);

-- name: audit_page
SELECT id, at, team, actor, action, target, details FROM audit_log
WHERE team = ? AND id < ? ORDER BY id DESC LIMIT ?;

-- name: catalog_version
SELECT coalesce(max(version), 0) FROM job_defs;

-- name: defs_live
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM job_defs WHERE deleted_at IS NULL ORDER BY id;

-- name: defs_all
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM job_defs ORDER BY id;

-- name: defs_changed
-- the change feed: one keyset page of definitions (tombstones too) after (version, id),
-- read through the index job_defs_change (migration 13)
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM job_defs WHERE (version, id) > (?, ?) ORDER BY version, id LIMIT ?;

-- name: defs_of_bucket
-- a share's read: one keyset page of the live definitions of one bucket (cronfleet/shares.py),
-- through the index job_defs_share (migration 15)
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM job_defs WHERE bucket = ? AND id > ? AND deleted_at IS NULL ORDER BY id LIMIT ?;

-- name: defs_next_bucket
-- the first bucket from this one on that holds a live definition (one probe of job_defs_share):
-- a share's read skips the empty buckets between
SELECT min(bucket) FROM job_defs WHERE bucket >= ? AND deleted_at IS NULL;

-- name: defs_unbucketed
-- live definitions written without a bucket (by a cronfleet older than migration 15, during a
-- rolling upgrade): a share's read goes through them last, judging each id's bucket itself
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM job_defs WHERE bucket IS NULL AND id > ? AND deleted_at IS NULL ORDER BY id LIMIT ?;

-- name: def_get
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM job_defs WHERE id = ?;

-- name: defs_page
-- one keyset page of a team's definitions in id order (BINARY: code points),
-- through the index job_defs_team (migration 14): team, with tombstones (true / false),
-- after, prefix, limit
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM job_defs
WHERE team = ? AND (deleted_at IS NULL OR ?) AND id > ? AND id >= ?
ORDER BY id LIMIT ?;

-- name: defs_page_below
-- defs_page with an upper bound (an id prefix's range): team, with tombstones, after,
-- prefix, end, limit
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM job_defs
WHERE team = ? AND (deleted_at IS NULL OR ?) AND id > ? AND id >= ? AND id < ?
ORDER BY id LIMIT ?;

-- name: defs_teams
-- the team of each id (a JSON list) that has a definition, tombstones included
SELECT id, team FROM job_defs WHERE id IN (SELECT value FROM json_each(?));

-- name: defs_estimate
-- SQLite keeps no row estimate: the exact count (the covering index job_defs_team)
SELECT count(*) FROM job_defs WHERE team = ? AND deleted_at IS NULL;

-- name: def_create
-- insert, or revive a tombstone of the same team (its old runs keep the id and the team);
-- nothing when the id is reserved to another team by a config or code job. The version
-- is the store-wide max + 1 (SQLite's write lock: one writer at a time)
INSERT INTO job_defs AS d (id, team, spec, version, created_at, updated_at, created_by,
    updated_by, saved_role, bucket)
SELECT ?, ?, ?, (SELECT coalesce(max(version), 0) + 1 FROM job_defs), ?, ?, ?, ?, ?, ?
WHERE NOT EXISTS (SELECT 1 FROM job_ids r WHERE r.id = ? AND r.team <> ?)
ON CONFLICT (id) DO UPDATE SET team = excluded.team, spec = excluded.spec,
    version = excluded.version, created_at = excluded.created_at,
    updated_at = excluded.updated_at, created_by = excluded.created_by,
    updated_by = excluded.updated_by, deleted_at = NULL, saved_role = excluded.saved_role
WHERE d.deleted_at IS NOT NULL AND d.team = excluded.team
RETURNING id, team, spec, version, created_at, updated_at, created_by, updated_by,
    deleted_at, saved_role;

-- name: def_update
-- a live definition of the team; the last pair: the expected version (NULL: any)
UPDATE job_defs SET spec = ?, version = (SELECT coalesce(max(version), 0) + 1 FROM job_defs),
    updated_at = ?, updated_by = ?, saved_role = ?
WHERE id = ? AND team = ? AND deleted_at IS NULL AND (CAST(? AS BIGINT) IS NULL OR version = ?)
RETURNING id, team, spec, version, created_at, updated_at, created_by, updated_by,
    deleted_at, saved_role;

-- name: def_delete
-- a tombstone: the runs of a deleted job keep its team
UPDATE job_defs SET deleted_at = ?,
    version = (SELECT coalesce(max(version), 0) + 1 FROM job_defs),
    updated_at = ?, updated_by = ?
WHERE id = ? AND team = ? AND deleted_at IS NULL
RETURNING id;

-- name: ids_reserve
-- ?1: now; ?2: a JSON list of [id, team, source]
INSERT INTO job_ids AS r (id, team, source, reserved_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), ?1
FROM json_each(?2) WHERE true
ON CONFLICT (id) DO UPDATE SET team = excluded.team, source = excluded.source
WHERE r.team <> excluded.team OR r.source <> excluded.source;

-- name: ids_of_team
SELECT id FROM job_ids WHERE team = ? ORDER BY id;

-- name: id_team
SELECT team FROM job_ids WHERE id = ?;
