-- The PostgreSQL store's queries, by name (loaded by cronfleet.store.queries).
-- Placeholders are psycopg's (%(key)s or %s). __S__ is the store's schema, put in once when
-- the store is created: nothing depends on search_path.
-- A batch travels as ONE jsonb parameter (an array of row arrays) read with
-- jsonb_array_elements: adapting 1,000 datetimes as a typed array costs ~13 ms of Python,
-- json.dumps of the same rows well under 1 ms. Times travel as integer epoch milliseconds
-- (to_timestamp(ms / 1000.0)) and are stored as timestamptz.
-- Every multi-row write to job_state first locks its rows in job_id order (the
-- materialized "locked" CTE), so concurrent batches never lock them in crossing orders.
-- The run columns are those of cronfleet.store.rows.RUN_COLUMNS, in that order.

-- name: read_states
-- with the two inputs of the watermark rule (store/base.py watermark(), applied by the
-- row mapper): the newest claimed slot and the newest claim-less skip
SELECT s.job_id, s.enabled_override, s.override_by, s.override_at, s.override_note,
       s.override_until, s.lease_holder, s.lease_token, s.lease_until,
       (SELECT max(c.slot) FROM __S__.claims c WHERE c.job_id = s.job_id),
       (SELECT max(r.slot) FROM __S__.runs r WHERE r.job_id = s.job_id AND r.dedupe IS NOT NULL),
       s.created_at
FROM __S__.job_state s WHERE s.job_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb));

-- name: read_overrides
-- only the rows with an override (a partial index): the batch's ids never travel
SELECT s.job_id, s.enabled_override, s.override_by, s.override_at, s.override_note,
       s.override_until, s.lease_holder, s.lease_token, s.lease_until,
       (SELECT max(c.slot) FROM __S__.claims c WHERE c.job_id = s.job_id),
       (SELECT max(r.slot) FROM __S__.runs r WHERE r.job_id = s.job_id AND r.dedupe IS NOT NULL),
       s.created_at
FROM __S__.job_state s WHERE s.enabled_override IS NOT NULL;

-- name: ensure_jobs
INSERT INTO __S__.job_state (job_id, created_at)
SELECT v.j, %(now)s FROM jsonb_array_elements_text(%(ids)s::jsonb) AS v(j)
ORDER BY v.j COLLATE "C"
ON CONFLICT (job_id) DO NOTHING
RETURNING job_id;

-- name: ensure_job
INSERT INTO __S__.job_state (job_id, created_at) VALUES (%s, %s) ON CONFLICT (job_id) DO NOTHING;

-- name: set_override
UPDATE __S__.job_state s SET enabled_override = %s, override_by = %s, override_at = %s,
                             override_note = %s, override_until = %s
WHERE s.job_id = %s
RETURNING s.job_id, s.enabled_override, s.override_by, s.override_at, s.override_note,
          s.override_until, s.lease_holder, s.lease_token, s.lease_until,
          (SELECT max(c.slot) FROM __S__.claims c WHERE c.job_id = s.job_id),
       (SELECT max(r.slot) FROM __S__.runs r WHERE r.job_id = s.job_id AND r.dedupe IS NOT NULL),
          s.created_at;

-- name: notify
SELECT pg_notify(%s, %s);

-- name: claim
-- rows: [job, slot ms]; inserted in (job, slot) order: overlapping batches queue
INSERT INTO __S__.claims (job_id, slot, instance_id, claimed_at)
SELECT e->>0, to_timestamp((e->>1)::bigint / 1000.0), %(inst)s, %(now)s
FROM jsonb_array_elements(%(rows)s::jsonb) AS e
ORDER BY (e->>0) COLLATE "C", 2
ON CONFLICT (job_id, slot) DO NOTHING
RETURNING token, job_id, (extract(epoch FROM slot) * 1000)::bigint;

-- name: draw_tokens
-- manual runs: a fencing token without a slot, one per id, in the order given
INSERT INTO __S__.claims (job_id, slot, instance_id, claimed_at)
SELECT v.j, NULL, %(inst)s, %(now)s
FROM jsonb_array_elements_text(%(ids)s::jsonb) WITH ORDINALITY AS v(j, n)
ORDER BY v.n
RETURNING token;

-- name: delete_claim
-- crash recovery: the interrupted run's claim (job, token)
DELETE FROM __S__.claims WHERE job_id = %s AND token = %s;

-- name: claim_one
-- crash recovery: the slot claimed again with a new token (job, slot ms, instance, now)
INSERT INTO __S__.claims (job_id, slot, instance_id, claimed_at)
VALUES (%s, to_timestamp(%s / 1000.0), %s, %s) RETURNING token;

-- name: delete_claims
-- early claims whose lease was busy: tokens as one JSON array
DELETE FROM __S__.claims WHERE token IN
  (SELECT (jsonb_array_elements_text(%(ids)s::jsonb))::bigint);

-- name: withdraw_claims
-- rows: [job, slot ms, token]; early claims given back, each fenced by its token (the
-- derived watermark is then as if the claim was never made)
DELETE FROM __S__.claims c
USING (SELECT e->>0 AS j, to_timestamp((e->>1)::bigint / 1000.0) AS slot,
              (e->>2)::bigint AS tok
       FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE c.token = v.tok AND c.job_id = v.j AND c.slot = v.slot
  -- never a claim whose slot has a run row (a survivor resolved it: instance_lost)
  AND NOT EXISTS (SELECT 1 FROM __S__.runs r WHERE r.fencing_token = c.token)
RETURNING c.job_id;

-- name: take_leases
-- rows: [job, lease token, lease until ms]: take each lease that is free or expired.
-- Before an expired lease is taken over, keep what it proves ("kept"): a fast-path run's
-- row is written after its handler starts, so if the holder died before that, the claim and
-- the unreleased lease are its only trace; its run is written first (open, deadline
-- passed) and the orphan reaper marks it interrupted (and recovers it where the job asks).
WITH locked AS MATERIALIZED (
  SELECT job_id FROM __S__.job_state
  WHERE job_id IN (SELECT e->>0 FROM jsonb_array_elements(%(rows)s::jsonb) AS e)
  ORDER BY job_id FOR UPDATE
),
kept AS (
  INSERT INTO __S__.runs (job_id, slot, triggered_by, status, instance_id, fencing_token,
                          manual, claimed_at, deadline, logs)
  SELECT s.job_id, coalesce(c.slot, c.claimed_at), 'schedule', 'running', s.lease_holder,
         s.lease_token, c.slot IS NULL, c.claimed_at, %(now)s - interval '1 millisecond',
         '[]'::jsonb
  FROM __S__.job_state s JOIN __S__.claims c ON c.token = s.lease_token AND c.job_id = s.job_id
  WHERE s.job_id IN (SELECT job_id FROM locked) AND s.lease_token IS NOT NULL
    AND s.lease_until <= %(now)s
    AND NOT EXISTS (SELECT 1 FROM __S__.runs r WHERE r.fencing_token = s.lease_token)
  ON CONFLICT (fencing_token) WHERE fencing_token IS NOT NULL DO NOTHING
),
v AS (SELECT e->>0 AS j, (e->>1)::bigint AS tok,
             to_timestamp((e->>2)::bigint / 1000.0) AS until
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e)
UPDATE __S__.job_state s SET
  lease_holder = CASE WHEN (s.lease_holder IS NULL OR s.lease_until <= %(now)s)
                      THEN %(inst)s ELSE s.lease_holder END,
  lease_token = CASE WHEN (s.lease_holder IS NULL OR s.lease_until <= %(now)s)
                     THEN v.tok ELSE s.lease_token END,
  lease_until = CASE WHEN (s.lease_holder IS NULL OR s.lease_until <= %(now)s)
                     THEN v.until ELSE s.lease_until END
FROM v
WHERE s.job_id = v.j AND s.job_id IN (SELECT job_id FROM locked)
RETURNING s.job_id, s.lease_token, s.lease_holder;

-- name: take_lane
-- max_instances > 1, lane 0 busy (take_leases just locked the job's job_state row, so the
-- lanes of a job are taken one transaction at a time): the lowest free or expired lane
-- 1..n-1, its row created on first use; an expired lane's unwritten run is kept first, as
-- take_leases keeps lane 0's
WITH kept AS (
  INSERT INTO __S__.runs (job_id, slot, triggered_by, status, instance_id, fencing_token,
                          manual, claimed_at, deadline, logs)
  SELECT s.job_id, coalesce(c.slot, c.claimed_at), 'schedule', 'running', s.lease_holder,
         s.lease_token, c.slot IS NULL, c.claimed_at, %(now)s - interval '1 millisecond',
         '[]'::jsonb
  FROM __S__.lease_lanes s JOIN __S__.claims c ON c.token = s.lease_token AND c.job_id = s.job_id
  WHERE s.job_id = %(job)s AND s.lane < %(n)s::int AND s.lease_token IS NOT NULL
    AND s.lease_until <= %(now)s
    AND NOT EXISTS (SELECT 1 FROM __S__.runs r WHERE r.fencing_token = s.lease_token)
  ON CONFLICT (fencing_token) WHERE fencing_token IS NOT NULL DO NOTHING
),
free AS (
  SELECT g AS lane FROM generate_series(1, %(n)s::int - 1) AS g
  WHERE NOT EXISTS (SELECT 1 FROM __S__.lease_lanes l
                    WHERE l.job_id = %(job)s AND l.lane = g
                      AND l.lease_holder IS NOT NULL AND l.lease_until > %(now)s)
  ORDER BY g LIMIT 1
)
INSERT INTO __S__.lease_lanes AS l (job_id, lane, lease_holder, lease_token, lease_until)
SELECT %(job)s, lane, %(inst)s, %(tok)s::bigint, to_timestamp(%(until)s::bigint / 1000.0)
FROM free
ON CONFLICT (job_id, lane) DO UPDATE SET lease_holder = excluded.lease_holder,
  lease_token = excluded.lease_token, lease_until = excluded.lease_until
RETURNING l.lane;

-- name: lane_holders
-- who holds lane 0 and lanes 1..n-1 of a job
SELECT lease_holder FROM __S__.job_state WHERE job_id = %(job)s AND lease_holder IS NOT NULL
UNION
SELECT lease_holder FROM __S__.lease_lanes WHERE job_id = %(job)s AND lane < %(n)s::int
  AND lease_holder IS NOT NULL;

-- name: release_lanes
-- rows: [job, token]; fenced by token (the lanes of release_leases; the caller locked the
-- jobs' job_state rows in release_leases)
UPDATE __S__.lease_lanes s SET lease_holder = NULL, lease_token = NULL, lease_until = NULL
FROM (SELECT e->>0 AS j, (e->>1)::bigint AS tok
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE s.lease_token = v.tok AND s.job_id = v.j;

-- name: renew_lanes
-- rows: [job, token, until ms] (the lanes of renew_leases)
UPDATE __S__.lease_lanes s SET lease_until = v.u
FROM (SELECT e->>0 AS j, (e->>1)::bigint AS tok, to_timestamp((e->>2)::bigint / 1000.0) AS u
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE s.lease_token = v.tok AND s.job_id = v.j;

-- name: release_leases
-- rows: [job, token]; fenced by token
WITH locked AS MATERIALIZED (
  SELECT job_id FROM __S__.job_state
  WHERE job_id IN (SELECT e->>0 FROM jsonb_array_elements(%(rows)s::jsonb) AS e)
  ORDER BY job_id FOR UPDATE
)
UPDATE __S__.job_state s SET lease_holder = NULL, lease_token = NULL, lease_until = NULL
FROM (SELECT e->>0 AS j, (e->>1)::bigint AS tok
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE s.job_id = v.j AND s.lease_token = v.tok AND s.job_id IN (SELECT job_id FROM locked);

-- name: release_unrun_leases
-- rows: [job, token]: leases of a batch whose COMMIT went unanswered and that has no run
WITH locked AS MATERIALIZED (
  SELECT job_id FROM __S__.job_state
  WHERE job_id IN (SELECT e->>0 FROM jsonb_array_elements(%(rows)s::jsonb) AS e)
  ORDER BY job_id FOR UPDATE
)
UPDATE __S__.job_state s SET lease_holder = NULL, lease_token = NULL, lease_until = NULL
FROM (SELECT e->>0 AS j, (e->>1)::bigint AS tok
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE s.job_id = v.j AND s.lease_token = v.tok
  AND NOT EXISTS (SELECT 1 FROM __S__.runs r WHERE r.fencing_token = v.tok)
  AND s.job_id IN (SELECT job_id FROM locked);

-- name: release_unrun_lanes
-- rows: [job, token]: release_unrun_leases, for lanes 1..N-1
UPDATE __S__.lease_lanes s SET lease_holder = NULL, lease_token = NULL, lease_until = NULL
FROM (SELECT e->>0 AS j, (e->>1)::bigint AS tok
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE s.lease_token = v.tok AND s.job_id = v.j
  AND NOT EXISTS (SELECT 1 FROM __S__.runs r WHERE r.fencing_token = v.tok);

-- name: renew_leases
-- rows: [job, token, until ms]
WITH locked AS MATERIALIZED (
  SELECT job_id FROM __S__.job_state
  WHERE job_id IN (SELECT e->>0 FROM jsonb_array_elements(%(rows)s::jsonb) AS e)
  ORDER BY job_id FOR UPDATE
)
UPDATE __S__.job_state s SET lease_until = v.u
FROM (SELECT e->>0 AS j, (e->>1)::bigint AS tok, to_timestamp((e->>2)::bigint / 1000.0) AS u
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE s.job_id = v.j AND s.lease_token = v.tok AND s.job_id IN (SELECT job_id FROM locked);

-- name: renew_deadlines
UPDATE __S__.runs r SET deadline = v.u
FROM (SELECT e->>0 AS j, (e->>1)::bigint AS tok, to_timestamp((e->>2)::bigint / 1000.0) AS u
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE r.fencing_token = v.tok AND r.job_id = v.j AND r.status = 'running';

-- name: insert_runs
-- rows: the RUN_INSERT_COLUMNS values (store/rows.py pg_run_rows); ids drawn in order
INSERT INTO __S__.runs (job_id, slot, triggered_by, status, reason, instance_id,
                        fencing_token, manual, is_catchup, is_recovery, attempt, claimed_at,
                        started_at, finished_at, deadline, result, error, logs, params,
                        forced_by)
SELECT e->>0, to_timestamp((e->>1)::bigint / 1000.0), e->>2, e->>3, e->>4, e->>5,
       (e->>6)::bigint, (e->>7)::boolean, (e->>8)::boolean, (e->>9)::boolean, (e->>10)::int,
       to_timestamp((e->>11)::bigint / 1000.0), to_timestamp((e->>12)::bigint / 1000.0),
       to_timestamp((e->>13)::bigint / 1000.0), to_timestamp((e->>14)::bigint / 1000.0),
       nullif(e->15, 'null'), e->>16, e->17, nullif(e->18, 'null'), e->>19
FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS v(e, n)
ORDER BY v.n
RETURNING id;

-- name: upsert_runs
-- the same rows, each carrying a fencing token: a token belongs to one run, so writing it
-- is idempotent (a group commit retried after a lost COMMIT answer writes it once) and a
-- slow holder's outcome completes the open row the reaper kept for it; a row that already
-- holds a final outcome is fenced (see the WHERE)
INSERT INTO __S__.runs (job_id, slot, triggered_by, status, reason, instance_id,
                        fencing_token, manual, is_catchup, is_recovery, attempt, claimed_at,
                        started_at, finished_at, deadline, result, error, logs, params,
                        forced_by)
SELECT e->>0, to_timestamp((e->>1)::bigint / 1000.0), e->>2, e->>3, e->>4, e->>5,
       (e->>6)::bigint, (e->>7)::boolean, (e->>8)::boolean, (e->>9)::boolean, (e->>10)::int,
       to_timestamp((e->>11)::bigint / 1000.0), to_timestamp((e->>12)::bigint / 1000.0),
       to_timestamp((e->>13)::bigint / 1000.0), to_timestamp((e->>14)::bigint / 1000.0),
       nullif(e->15, 'null'), e->>16, e->17, nullif(e->18, 'null'), e->>19
FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS v(e, n)
ORDER BY v.n
ON CONFLICT (fencing_token) WHERE fencing_token IS NOT NULL DO UPDATE SET
  status = EXCLUDED.status, reason = EXCLUDED.reason, started_at = EXCLUDED.started_at,
  finished_at = EXCLUDED.finished_at, deadline = EXCLUDED.deadline, result = EXCLUDED.result,
  error = EXCLUDED.error, logs = EXCLUDED.logs
-- the fence: a row holding a final outcome is never overwritten by another one (the
-- store attaches the late result instead, store/ledger.py is_late)
WHERE runs.status IN ('running', 'pending') OR runs.status = EXCLUDED.status
RETURNING id, fencing_token;

-- name: finish_runs
-- rows: [id, status, reason, started ms, finished ms, deadline ms, result, error, logs,
--        attempt]
UPDATE __S__.runs r SET status = v.status, reason = v.reason, started_at = v.started_at,
  finished_at = v.finished_at, deadline = v.deadline, result = v.result, error = v.error,
  logs = v.logs, attempt = v.attempt
FROM (SELECT (e->>0)::bigint AS id, e->>1 AS status, e->>2 AS reason,
             to_timestamp((e->>3)::bigint / 1000.0) AS started_at,
             to_timestamp((e->>4)::bigint / 1000.0) AS finished_at,
             to_timestamp((e->>5)::bigint / 1000.0) AS deadline,
             nullif(e->6, 'null') AS result, e->>7 AS error, e->8 AS logs,
             coalesce((e->>9)::int, 1) AS attempt
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e) AS v
WHERE r.id = v.id AND (r.status IN ('running', 'pending') OR r.status = v.status)
RETURNING r.id;

-- name: start_runs
-- rows: [run id, deadline ms]: pending runs whose turn came
UPDATE __S__.runs SET status = 'running', started_at = %(now)s,
  deadline = to_timestamp((e->>1)::bigint / 1000.0)
FROM jsonb_array_elements(%(rows)s::jsonb) AS e
WHERE runs.id = (e->>0)::bigint AND runs.status = 'pending';

-- name: skip_busy_runs
-- rows: [run id, log line]
UPDATE __S__.runs SET status = 'skipped', reason = %(reason)s, finished_at = %(now)s,
  deadline = NULL, result = %(result)s::jsonb,
  logs = coalesce(runs.logs, '[]'::jsonb) || jsonb_build_array(e->>1)
FROM jsonb_array_elements(%(rows)s::jsonb) AS e WHERE runs.id = (e->>0)::bigint;

-- name: record_skips
-- rows: [job, slot ms, triggered_by, reason, instance, result, logs]. Each skip takes its
-- slot's claim first: a slot already claimed (a run, or an earlier skip, whatever its
-- reason or instance) gets no row, so a slot never ends with two final rows; a repeat
-- within the batch keeps its first row
WITH e AS (
  SELECT DISTINCT ON (v->>0, (v->>1)::bigint) v->>0 AS j,
         to_timestamp((v->>1)::bigint / 1000.0) AS slot, v
  FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS x(v, n)
  ORDER BY v->>0, (v->>1)::bigint, n
),
won AS (
  INSERT INTO __S__.claims (job_id, slot, instance_id, claimed_at)
  SELECT e.j, e.slot, coalesce(e.v->>4, ''), %(now)s FROM e ORDER BY e.j COLLATE "C", 2
  ON CONFLICT (job_id, slot) DO NOTHING
  RETURNING job_id, slot
)
INSERT INTO __S__.runs (job_id, slot, triggered_by, status, reason, instance_id, claimed_at,
                        finished_at, result, logs, dedupe)
SELECT e.j, e.slot, e.v->>2, 'skipped', e.v->>3, e.v->>4, %(now)s, %(now)s, e.v->5, e.v->6,
       e.v->>3
FROM e JOIN won ON won.job_id = e.j AND won.slot = e.slot
ORDER BY e.j COLLATE "C", 2
ON CONFLICT (job_id, slot, dedupe) WHERE dedupe IS NOT NULL DO NOTHING;

-- name: reap
-- the log line is the ledger's: before || holder (or anon) || after (store/ledger.py)
UPDATE __S__.runs SET status = 'interrupted', reason = %(reason)s, finished_at = %(now)s,
  deadline = NULL, error = %(error)s,
  logs = coalesce(logs, '[]'::jsonb) || jsonb_build_array(
    %(before)s::text || coalesce(instance_id, %(anon)s::text) || %(after)s::text)
WHERE status IN ('running', 'pending') AND deadline < %(now)s
  AND NOT EXISTS (SELECT 1 FROM __S__.job_state s WHERE s.job_id = runs.job_id
                  AND s.lease_token = runs.fencing_token AND s.lease_until > %(now)s)
  AND NOT EXISTS (SELECT 1 FROM __S__.lease_lanes s WHERE s.lease_token = runs.fencing_token
                  AND s.job_id = runs.job_id AND s.lease_until > %(now)s)
RETURNING id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
          is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
          result, error, logs, params, forced_by;

-- name: lost_runs
-- claimed and leased, but the holder died before writing its run row; SKIP LOCKED: two
-- reapers never rebuild the same row (the other one sees it at its next pass, released)
SELECT s.job_id, s.lease_token, s.lease_holder, c.slot, c.claimed_at
FROM __S__.job_state s JOIN __S__.claims c ON c.job_id = s.job_id AND c.token = s.lease_token
WHERE s.lease_token IS NOT NULL AND s.lease_until < %(now)s
  AND NOT EXISTS (SELECT 1 FROM __S__.runs r WHERE r.job_id = s.job_id
                  AND r.fencing_token = s.lease_token)
ORDER BY s.job_id
FOR UPDATE OF s SKIP LOCKED;

-- name: slot_runs
-- the slot timeline's read: the history's filters, ORDER BY and LIMIT are appended
SELECT id, extract(epoch FROM slot)::float8, status, reason, manual
FROM __S__.runs;

-- name: job_slot_runs
-- find_runs narrowed to (job_id and) a timeline's fields: its filters, ORDER BY and LIMIT
-- are appended
SELECT job_id, id, extract(epoch FROM slot)::float8, status, reason, manual
FROM __S__.runs;

-- name: lost_lane_runs
-- lost_runs, for lanes 1..N-1
SELECT s.job_id, s.lease_token, s.lease_holder, c.slot, c.claimed_at
FROM __S__.lease_lanes s JOIN __S__.claims c ON c.job_id = s.job_id AND c.token = s.lease_token
WHERE s.lease_token IS NOT NULL AND s.lease_until < %(now)s
  AND NOT EXISTS (SELECT 1 FROM __S__.runs r WHERE r.job_id = s.job_id
                  AND r.fencing_token = s.lease_token)
ORDER BY s.job_id, s.lane
FOR UPDATE OF s SKIP LOCKED;

-- name: runs
-- the history: filters (job, status, cursor), ORDER BY and LIMIT are appended
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM __S__.runs;

-- name: runs_by_id
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM __S__.runs WHERE id IN (SELECT (jsonb_array_elements_text(%(ids)s::jsonb))::bigint);

-- name: get_run
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM __S__.runs WHERE id = %s;

-- name: last_slot_runs
-- last_runs narrowed to a timeline's fields (id, slot, status, reason, manual); since
-- NULL: every one, else only the runs at or after it (epoch s) or of one of statuses
SELECT r.* FROM jsonb_array_elements_text(%(ids)s::jsonb) AS v(j)
CROSS JOIN LATERAL (
  SELECT job_id, id, extract(epoch FROM slot)::float8 AS at, status, reason, manual
  FROM __S__.runs WHERE job_id = v.j ORDER BY id DESC LIMIT 1) AS r
WHERE %(since)s::float8 IS NULL OR r.at >= %(since)s::float8
   OR r.status = ANY(%(statuses)s::text[]);

-- name: last_runs
-- the newest run of each job: one index probe per job
SELECT r.* FROM jsonb_array_elements_text(%(ids)s::jsonb) AS v(j)
CROSS JOIN LATERAL (
  SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
         is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
         result, error, logs, params, forced_by
  FROM __S__.runs WHERE job_id = v.j ORDER BY id DESC LIMIT 1) AS r;

-- name: prune_claim_blocks
-- retention in bounded pieces (store/driver.py Retention; transport.prune): claims are walked
-- by their place in the table, a range of blocks per piece (a TID range scan)
SELECT pg_relation_size('__S__.claims'::regclass) / current_setting('block_size')::int;

-- name: prune_newest_claims
-- the next job ids that have claims, after a given one, each with the place (ctid) of its
-- claim of its newest slot (the watermark reads it: retention keeps it): a loose scan of
-- claims_job_slot, two index probes per job
WITH RECURSIVE j(job_id) AS (
  (SELECT job_id FROM __S__.claims WHERE job_id > %(after)s ORDER BY job_id LIMIT 1)
  UNION ALL
  SELECT (SELECT c.job_id FROM __S__.claims c WHERE c.job_id > j.job_id
          ORDER BY c.job_id LIMIT 1)
  FROM j WHERE j.job_id IS NOT NULL)
SELECT j.job_id, (SELECT c.ctid::text FROM __S__.claims c
                  WHERE c.job_id = j.job_id AND c.slot IS NOT NULL
                  ORDER BY c.slot DESC LIMIT 1)
FROM j WHERE j.job_id IS NOT NULL LIMIT %(limit)s;

-- name: prune_claims_in
-- the claims in a range of blocks older than the cut-off, except the kept ones; slot-less
-- manual tokens are not kept
DELETE FROM __S__.claims
WHERE ctid >= %(lo)s::tid AND ctid < %(hi)s::tid AND claimed_at < %(cut)s
  AND ctid <> ALL(%(keep)s::text[]::tid[]);

-- name: prune_kept_skips
-- each job's newest claim-less skip (the watermark reads it: retention keeps it)
SELECT job_id, max(id) FROM __S__.runs WHERE dedupe IS NOT NULL GROUP BY job_id;

-- name: prune_run_bound
-- the id a batch of runs after a given one ends at (NULL: fewer are left)
SELECT id FROM __S__.runs WHERE id > %s ORDER BY id OFFSET %s LIMIT 1;

-- name: prune_old_runs_in
-- the finished runs in an id range older than the cut-off, except the kept skips
DELETE FROM __S__.runs
WHERE id > %(lo)s AND id <= %(hi)s AND finished_at < %(cut)s
  AND status NOT IN ('running', 'pending') AND id <> ALL(%(keep)s::bigint[]);

-- name: prune_run_jobs
-- the next job ids that have runs, after a given one: one index probe each (a loose scan
-- of runs_job_id, not a pass over the table)
WITH RECURSIVE j(job_id) AS (
  (SELECT job_id FROM __S__.runs WHERE job_id > %(after)s ORDER BY job_id LIMIT 1)
  UNION ALL
  SELECT (SELECT r.job_id FROM __S__.runs r WHERE r.job_id > j.job_id
          ORDER BY r.job_id LIMIT 1)
  FROM j WHERE j.job_id IS NOT NULL)
SELECT job_id FROM j WHERE job_id IS NOT NULL LIMIT %(limit)s;

-- name: prune_cuts_of
-- each of these jobs' newest run beyond its newest n (NULL: not more than that)
SELECT v.j, (SELECT r.id FROM __S__.runs r WHERE r.job_id = v.j
             ORDER BY r.id DESC LIMIT 1 OFFSET %(n)s)
FROM unnest(%(jobs)s::text[]) AS v(j);

-- name: prune_runs_beyond
-- at most a batch of finished runs at or below each job's cut, except its kept skip: every
-- row the scan meets is deleted but the few open ones and kept skips
DELETE FROM __S__.runs WHERE id = ANY(ARRAY(
  SELECT r.id FROM unnest(%(jobs)s::text[], %(cuts)s::bigint[], %(keep)s::bigint[])
                   AS p(j, cut, keep)
  JOIN __S__.runs r ON r.job_id = p.j AND r.id <= p.cut
  WHERE r.status NOT IN ('running', 'pending') AND r.id IS DISTINCT FROM p.keep
  LIMIT %(batch)s));

-- name: clock
SELECT extract(epoch FROM clock_timestamp())::float8;

-- name: migration_lock
-- one lock per schema: concurrent starters wait here, then find nothing to do
SELECT pg_advisory_xact_lock(%s, hashtext(%s));

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS __S__;

-- name: schema_migrations
CREATE TABLE IF NOT EXISTS __S__.schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now());

-- name: schema_version
SELECT max(version) FROM __S__.schema_migrations;

-- name: schema_versions
-- every version applied: numbers are handed out ahead, so one may land after a higher one
SELECT version FROM __S__.schema_migrations;

-- name: search_path
-- the migration files name tables without a schema
SET LOCAL search_path TO __S__;

-- name: migration_applied
INSERT INTO __S__.schema_migrations (version, name) VALUES (%s, %s);

-- name: runs_by_token
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM __S__.runs
WHERE fencing_token IN (SELECT (jsonb_array_elements_text(%(tokens)s::jsonb))::bigint);

-- name: attach_late
-- a late result kept on the row that holds the slot's outcome
UPDATE __S__.runs SET result = %(result)s::jsonb, logs = %(logs)s::jsonb WHERE id = %(id)s;

-- name: instance_get
SELECT lost_at, lost_by FROM __S__.instances WHERE instance_id = %(id)s FOR UPDATE;

-- name: instance_register
INSERT INTO __S__.instances (instance_id, host, pid, role, version, started_at, heartbeat_at,
  plans)
VALUES (%(id)s, %(host)s, %(pid)s, %(role)s, %(version)s, %(now)s, %(now)s, %(plans)s)
ON CONFLICT (instance_id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
  role = EXCLUDED.role, version = EXCLUDED.version, started_at = EXCLUDED.started_at,
  heartbeat_at = EXCLUDED.heartbeat_at, lost_at = NULL, lost_by = NULL,
  plans = EXCLUDED.plans;

-- name: instance_beat
UPDATE __S__.instances SET heartbeat_at = %(now)s, plans = %(plans)s
WHERE instance_id = %(id)s AND lost_at IS NULL;

-- name: instances_live
-- every instance not declared lost, and whether it beat at or after the cut-off (live;
-- else stale: break_lost has work)
SELECT instance_id, plans, heartbeat_at >= %(cut)s FROM __S__.instances
WHERE lost_at IS NULL ORDER BY instance_id COLLATE "C";

-- name: instance_beat_alone
-- the usual heartbeat, one statement outside a transaction (one round trip): this
-- instance's row beats if it is there and not declared lost (beaten: true), and every
-- instance not declared lost is read as instances_live reads it. The read sees the rows
-- as the statement began, without this beat (the caller counts this instance live).
-- %(now)s: the test clock, or NULL for the database's time (returned: the beat's time).
-- At least one row, even with no instance (the LEFT JOIN): beaten is always answered.
WITH at AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
beat AS (
  UPDATE __S__.instances SET heartbeat_at = (SELECT now FROM at), plans = %(plans)s
  WHERE instance_id = %(id)s AND lost_at IS NULL
  RETURNING instance_id)
SELECT i.instance_id, i.plans, i.heartbeat_at >= at.now - make_interval(secs => %(ttl)s),
  EXISTS (SELECT 1 FROM beat) AS beaten, at.now
FROM at LEFT JOIN __S__.instances i ON i.lost_at IS NULL
ORDER BY i.instance_id COLLATE "C";

-- name: instances_stale
-- the instances the UPDATE below would declare lost, read without a lock (a process frozen
-- inside its heartbeat holds its row: their sessions are ended first, ops.declare_lost)
SELECT instance_id FROM __S__.instances
WHERE lost_at IS NULL AND heartbeat_at < %(cut)s AND instance_id <> %(me)s;

-- name: instances_declare_lost
-- exactly one survivor declares each (the row lock; the WHERE is re-checked after it)
UPDATE __S__.instances SET lost_at = %(now)s, lost_by = %(me)s
WHERE lost_at IS NULL AND heartbeat_at < %(cut)s AND instance_id <> %(me)s
RETURNING instance_id, host, pid, role, version, started_at, heartbeat_at, lost_at, lost_by;

-- name: end_sessions
-- the sessions of the instances just declared lost, by application_name (ops.session_name),
-- in this database; ended at once (their open transactions roll back)
SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND a.application_name IN (SELECT jsonb_array_elements_text(%(names)s::jsonb));

-- name: instances_all
SELECT instance_id, host, pid, role, version, started_at, heartbeat_at, lost_at, lost_by
FROM __S__.instances ORDER BY started_at, instance_id;

-- name: instance_leave
DELETE FROM __S__.instances WHERE instance_id = %(id)s;

-- name: interrupt_lost
-- rows: [instance, error, log line]: open runs of the instances declared lost
UPDATE __S__.runs SET status = 'interrupted', reason = %(reason)s, finished_at = %(now)s,
  deadline = NULL, error = e->>1,
  logs = coalesce(runs.logs, '[]'::jsonb) || jsonb_build_array(e->>2)
FROM jsonb_array_elements(%(rows)s::jsonb) AS e
WHERE runs.status IN ('running', 'pending') AND runs.instance_id = e->>0
RETURNING id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
          is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
          result, error, logs, params, forced_by;

-- name: leases_of
-- leases held by these instances (locked in job_id order), with the claim and whether the
-- token already has a run row
SELECT s.job_id, s.lease_token, s.lease_holder, c.slot, c.claimed_at,
       EXISTS (SELECT 1 FROM __S__.runs r WHERE r.fencing_token = s.lease_token)
FROM __S__.job_state s LEFT JOIN __S__.claims c ON c.token = s.lease_token
WHERE s.lease_token IS NOT NULL
  AND s.lease_holder IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
ORDER BY s.job_id
FOR UPDATE OF s;

-- name: lanes_of
-- leases_of, for lanes 1..N-1
SELECT s.job_id, s.lease_token, s.lease_holder, c.slot, c.claimed_at,
       EXISTS (SELECT 1 FROM __S__.runs r WHERE r.fencing_token = s.lease_token)
FROM __S__.lease_lanes s LEFT JOIN __S__.claims c ON c.token = s.lease_token
WHERE s.lease_token IS NOT NULL
  AND s.lease_holder IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
ORDER BY s.job_id, s.lane
FOR UPDATE OF s;

-- name: registry_of
-- the rows an instance declares (its publishes never interleave: Registry writes one at a
-- time, and the rows are written in chunks of their own transactions after this read)
SELECT job_id, digest FROM __S__.job_registry WHERE instance_id = %(id)s;

-- name: registry_drop
DELETE FROM __S__.job_registry
WHERE instance_id = %(id)s AND job_id IN (SELECT jsonb_array_elements_text(%(gone)s::jsonb));

-- name: registry_put
-- rows: [[job, team, source, digest, spec], ...]: a new or changed spec
INSERT INTO __S__.job_registry (job_id, instance_id, team, source, digest, spec, declared_at,
                                seen_at)
SELECT e->>0, %(id)s, e->>1, e->>2, e->>3, e->4, %(now)s, %(now)s
FROM jsonb_array_elements(%(rows)s::jsonb) AS e
ON CONFLICT (job_id, instance_id) DO UPDATE SET team = EXCLUDED.team,
  source = EXCLUDED.source, digest = EXCLUDED.digest, spec = EXCLUDED.spec,
  declared_at = EXCLUDED.declared_at, seen_at = EXCLUDED.seen_at;

-- name: registry_touch
UPDATE __S__.job_registry SET seen_at = %(now)s WHERE instance_id = %(id)s;

-- name: registry_all
SELECT r.job_id, r.instance_id, r.team, r.source, r.digest, r.spec, r.declared_at,
       r.seen_at, i.lost_at, i.heartbeat_at, i.instance_id IS NOT NULL
FROM __S__.job_registry r LEFT JOIN __S__.instances i ON i.instance_id = r.instance_id
ORDER BY r.job_id COLLATE "C", r.instance_id COLLATE "C";

-- name: request_add
INSERT INTO __S__.requests (kind, job_id, target, payload, requested_by, requested_at)
VALUES (%(kind)s, %(job)s, %(target)s, %(payload)s::jsonb, %(by)s, %(now)s)
RETURNING id, requested_at;

-- name: requests_open
-- the untaken requests meant for the instance or for no instance in particular (the
-- partial index requests_open): the caller keeps those of the jobs it holds
SELECT id, job_id, target FROM __S__.requests
WHERE taken_by IS NULL AND answered_at IS NULL AND (target = %(id)s OR target IS NULL)
ORDER BY id;

-- name: requests_take
-- take these requests if still untaken; two instances taking one together: the second
-- UPDATE waits for the first's row lock, then finds it taken
UPDATE __S__.requests SET taken_by = %(id)s, taken_at = %(now)s
WHERE id = ANY(%(ids)s) AND taken_by IS NULL AND answered_at IS NULL
RETURNING id, kind, job_id, target, payload, requested_by, requested_at, taken_by, taken_at,
          answered_at, run_id, error;

-- name: request_answer
UPDATE __S__.requests SET answered_at = %(now)s, run_id = %(run)s, error = %(error)s
WHERE id = %(rid)s AND answered_at IS NULL AND (NOT %(untaken)s OR taken_by IS NULL);

-- name: request_note
UPDATE __S__.requests SET payload = %(payload)s
WHERE id = %(rid)s AND answered_at IS NULL AND taken_by IS NOT NULL;

-- name: request_get
SELECT id, kind, job_id, target, payload, requested_by, requested_at, taken_by, taken_at,
       answered_at, run_id, error
FROM __S__.requests WHERE id = %(rid)s;
