-- The side tables on PostgreSQL: the vault's ciphertexts, job health, API tokens, the audit
-- log, the catalog of API jobs and the ids reserved by config or code jobs (migrations
-- v2, v4). The same names as sqlite/side/queries.sql, run by store/sql_side.py on the
-- run store's pool. Placeholders: %s in order; __S__: the store's quoted schema. Times:
-- BIGINT milliseconds, except in secrets and job_health (timestamptz).

-- name: secret_get
SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts
FROM __S__.secrets WHERE namespace = %s AND name = %s;

-- name: secret_exists
-- in the transaction of secret_put: whether it creates the row
SELECT 1 FROM __S__.secrets WHERE namespace = %s AND name = %s FOR UPDATE;

-- name: secret_put
-- create or replace (value and hosts)
INSERT INTO __S__.secrets (namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, name) DO UPDATE SET key_id = excluded.key_id,
    nonce = excluded.nonce, ciphertext = excluded.ciphertext,
    updated_at = excluded.updated_at, hosts = excluded.hosts;

-- name: secret_delete
DELETE FROM __S__.secrets WHERE namespace = %s AND name = %s RETURNING name;

-- name: secrets_all
SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts
FROM __S__.secrets ORDER BY namespace, name;

-- name: secrets_of_namespace
SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts
FROM __S__.secrets WHERE namespace = %s ORDER BY name;

-- name: health_ensure
INSERT INTO __S__.job_health (job_id) VALUES (%s) ON CONFLICT DO NOTHING;

-- name: health_lock
-- the row locked until the transaction ends: what is read stays true
SELECT job_id, last_outcome, consecutive_failures, successes, failures, last_duration,
    last_run_at
FROM __S__.job_health WHERE job_id = %s FOR UPDATE;

-- name: health_write
UPDATE __S__.job_health SET last_outcome = %s, consecutive_failures = %s, successes = %s,
    failures = %s, last_duration = %s, last_run_at = %s
WHERE job_id = %s;

-- name: health_get
SELECT job_id, last_outcome, consecutive_failures, successes, failures, last_duration,
    last_run_at
FROM __S__.job_health WHERE job_id = %s;

-- name: token_insert
INSERT INTO __S__.api_tokens (id, name, team, role, hash, created_at, created_by)
VALUES (%s, %s, %s, %s, %s, %s, %s);

-- name: token_by_hash
SELECT id, name, team, role, created_at, created_by, revoked_at, last_used_at
FROM __S__.api_tokens WHERE hash = %s AND revoked_at IS NULL;

-- name: token_touch
UPDATE __S__.api_tokens SET last_used_at = %s WHERE id = %s;

-- name: tokens_all
SELECT id, name, team, role, created_at, created_by, revoked_at, last_used_at
FROM __S__.api_tokens ORDER BY team, created_at, id;

-- name: tokens_of_team
SELECT id, name, team, role, created_at, created_by, revoked_at, last_used_at
FROM __S__.api_tokens WHERE team = %s ORDER BY created_at, id;

-- name: token_revoke
-- the token with this id, or every live token with this name
UPDATE __S__.api_tokens SET revoked_at = %s WHERE revoked_at IS NULL AND (id = %s OR name = %s)
RETURNING id, name, team, role, created_at, created_by, revoked_at, last_used_at;

-- name: audit_insert
INSERT INTO __S__.audit_log (at, team, actor, action, target, details) VALUES (%s, %s, %s, %s, %s, %s);

-- name: audit_page
SELECT id, at, team, actor, action, target, details FROM __S__.audit_log
WHERE team = %s AND id < %s ORDER BY id DESC LIMIT %s;

-- name: catalog_version
SELECT coalesce(max(version), 0) FROM __S__.job_defs;

-- name: defs_live
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM __S__.job_defs WHERE deleted_at IS NULL ORDER BY id;

-- name: defs_all
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM __S__.job_defs ORDER BY id;

-- name: defs_changed
-- the change feed: one keyset page of definitions (tombstones too) after (version, id),
-- read through the index job_defs_change (migration 13)
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM __S__.job_defs WHERE (version, id) > (%s, %s) ORDER BY version, id LIMIT %s;

-- name: defs_of_bucket
-- a share's read: one keyset page of the live definitions of one bucket (cronfleet/shares.py),
-- through the index job_defs_share (migration 15)
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM __S__.job_defs WHERE bucket = %s AND id > %s AND deleted_at IS NULL ORDER BY id LIMIT %s;

-- name: defs_next_bucket
-- the first bucket from this one on that holds a live definition (one probe of job_defs_share):
-- a share's read skips the empty buckets between
SELECT min(bucket) FROM __S__.job_defs WHERE bucket >= %s AND deleted_at IS NULL;

-- name: defs_unbucketed
-- live definitions written without a bucket (by a cronfleet older than migration 15, during a
-- rolling upgrade): a share's read goes through them last, judging each id's bucket itself
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM __S__.job_defs WHERE bucket IS NULL AND id > %s AND deleted_at IS NULL ORDER BY id LIMIT %s;

-- name: def_get
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM __S__.job_defs WHERE id = %s;

-- name: defs_page
-- one keyset page of a team's definitions in id order (code points: COLLATE "C"),
-- through the index job_defs_team (migration 14): team, with tombstones (true / false),
-- after, prefix, limit
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM __S__.job_defs
WHERE team = %s AND (deleted_at IS NULL OR %s) AND id COLLATE "C" > %s AND id COLLATE "C" >= %s
ORDER BY id COLLATE "C" LIMIT %s;

-- name: defs_page_below
-- defs_page with an upper bound (an id prefix's range): team, with tombstones, after,
-- prefix, end, limit
SELECT id, team, spec, version, created_at, updated_at, created_by, updated_by, deleted_at,
    saved_role
FROM __S__.job_defs
WHERE team = %s AND (deleted_at IS NULL OR %s) AND id COLLATE "C" > %s AND id COLLATE "C" >= %s
    AND id COLLATE "C" < %s
ORDER BY id COLLATE "C" LIMIT %s;

-- name: defs_teams
-- the team of each id (a JSON list) that has a definition, tombstones included
SELECT id, team FROM __S__.job_defs
WHERE id IN (SELECT jsonb_array_elements_text(%s::jsonb));

-- name: defs_count_capped
-- a team's live definitions, counted up to a cap (an index-only scan of job_defs_team)
SELECT count(*) FROM (SELECT 1 FROM __S__.job_defs WHERE team = %s AND deleted_at IS NULL
    LIMIT %s) s;

-- name: defs_estimate
-- about how many live definitions a team has, without a scan: the table's row estimate
-- (pg_class.reltuples, kept by ANALYZE / autovacuum) times the team's share among the
-- most common values of job_defs.team (pg_stats); NULL when the statistics do not say
-- (never analysed, or a team too rare to be listed). Tombstones are counted too.
SELECT (c.reltuples * m.f)::bigint
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'team'
CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS m(v, f)
WHERE c.oid = to_regclass('__S__.job_defs') AND c.reltuples > 0 AND m.v = %s;

-- name: def_create_batch
-- the definitions of a batch (SideSQL.write_each of "def_create": every write of a new
-- definition, one or many; SQLite runs its def_create once per item): %s is a JSON array
-- with each item's parameters, in order (SqlApiStore._create_params). For each: insert,
-- or revive a tombstone of the same team (its old runs keep the id and the team); nothing
-- for an id reserved to another team by a config or code job. The versions are the
-- store-wide max + 1, + 2, ... in the items' order (catalog_lock first). A row comes back
-- per item written, its id first: the item's first parameter
INSERT INTO __S__.job_defs AS d (id, team, spec, version, created_at, updated_at, created_by,
    updated_by, saved_role, bucket)
SELECT i.p->>0, i.p->>1, i.p->>2,
    (SELECT coalesce(max(version), 0) FROM __S__.job_defs) + i.n,
    (i.p->>3)::bigint, (i.p->>4)::bigint, i.p->>5, i.p->>6, i.p->>7, (i.p->>8)::integer
FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS i(p, n)
WHERE NOT EXISTS (SELECT 1 FROM __S__.job_ids r WHERE r.id = i.p->>9 AND r.team <> i.p->>10)
ORDER BY i.n
ON CONFLICT (id) DO UPDATE SET team = excluded.team, spec = excluded.spec,
    version = excluded.version, created_at = excluded.created_at,
    updated_at = excluded.updated_at, created_by = excluded.created_by,
    updated_by = excluded.updated_by, deleted_at = NULL, saved_role = excluded.saved_role
WHERE d.deleted_at IS NOT NULL AND d.team = excluded.team
RETURNING id, team, spec, version, created_at, updated_at, created_by, updated_by,
    deleted_at, saved_role;

-- name: def_update
-- a live definition of the team; the last pair: the expected version (NULL: any)
UPDATE __S__.job_defs SET spec = %s, version = (SELECT coalesce(max(version), 0) + 1 FROM __S__.job_defs),
    updated_at = %s, updated_by = %s, saved_role = %s
WHERE id = %s AND team = %s AND deleted_at IS NULL AND (CAST(%s AS BIGINT) IS NULL OR version = %s)
RETURNING id, team, spec, version, created_at, updated_at, created_by, updated_by,
    deleted_at, saved_role;

-- name: def_delete
-- a tombstone: the runs of a deleted job keep its team
UPDATE __S__.job_defs SET deleted_at = %s,
    version = (SELECT coalesce(max(version), 0) + 1 FROM __S__.job_defs),
    updated_at = %s, updated_by = %s
WHERE id = %s AND team = %s AND deleted_at IS NULL
RETURNING id;

-- name: ids_reserve
-- now, then a JSON list of [id, team, source]
INSERT INTO __S__.job_ids AS r (id, team, source, reserved_at)
SELECT e ->> 0, e ->> 1, e ->> 2, n.now
FROM (SELECT %s::bigint AS now) n, jsonb_array_elements(%s::jsonb) e
ON CONFLICT (id) DO UPDATE SET team = excluded.team, source = excluded.source
WHERE r.team <> excluded.team OR r.source <> excluded.source;

-- name: ids_of_team
SELECT id FROM __S__.job_ids WHERE team = %s ORDER BY id;

-- name: id_team
SELECT team FROM __S__.job_ids WHERE id = %s;

-- name: catalog_lock
-- serialises catalog writes for the transaction ("cronfleet catalog"), so versions never
-- commit out of order
SELECT pg_advisory_xact_lock(27991845613298036);

-- name: announce
-- channel, payload
SELECT pg_notify(%s, %s);
