-- The SQLite store's queries, by name (loaded by cronfleet.store.queries).
-- Placeholders are sqlite3's (? or ?N). Times are integer milliseconds since the epoch.
-- Batches travel as ONE JSON parameter read with json_each (no limit on bound parameters).
-- The run columns are those of cronfleet.store.rows.RUN_COLUMNS, in that order.

-- name: read_states
-- job state rows with the two inputs of the watermark rule (store/base.py watermark(),
-- applied by the row mapper): the newest claimed slot and the newest claim-less skip
SELECT s.job_id, s.enabled_override, s.override_by, s.override_at, s.override_note,
       s.override_until, s.lease_holder, s.lease_token, s.lease_until,
       (SELECT max(c.slot) FROM claims c WHERE c.job_id = s.job_id),
       (SELECT max(r.slot) FROM runs r WHERE r.job_id = s.job_id AND r.dedupe IS NOT NULL),
       s.created_at
FROM job_state s WHERE s.job_id IN (SELECT value FROM json_each(?));

-- name: read_overrides
-- the same columns, only the rows with an override (a partial index): every instant
SELECT s.job_id, s.enabled_override, s.override_by, s.override_at, s.override_note,
       s.override_until, s.lease_holder, s.lease_token, s.lease_until,
       (SELECT max(c.slot) FROM claims c WHERE c.job_id = s.job_id),
       (SELECT max(r.slot) FROM runs r WHERE r.job_id = s.job_id AND r.dedupe IS NOT NULL),
       s.created_at
FROM job_state s WHERE s.enabled_override IS NOT NULL;

-- name: ensure_jobs
-- ?1 now, ?2 job ids
INSERT INTO job_state (job_id, created_at) SELECT value, ?1 FROM json_each(?2) WHERE true
ON CONFLICT (job_id) DO NOTHING;

-- name: ensure_job
INSERT INTO job_state (job_id, created_at) VALUES (?, ?) ON CONFLICT (job_id) DO NOTHING;

-- name: set_override
UPDATE job_state SET enabled_override = ?, override_by = ?, override_at = ?,
                     override_note = ?, override_until = ? WHERE job_id = ?;

-- name: claim
-- ?1 instance, ?2 now, ?3 [[job, slot], ...]: the unique (job, slot) claim of each slot
INSERT INTO claims (job_id, slot, instance_id, claimed_at)
SELECT value->>0, value->>1, ?1, ?2 FROM json_each(?3) WHERE true
ON CONFLICT (job_id, slot) DO NOTHING
RETURNING token, job_id, slot;

-- name: claim_one
-- a recovery's new claim of its slot (job, slot, instance, now)
INSERT INTO claims (job_id, slot, instance_id, claimed_at) VALUES (?, ?, ?, ?) RETURNING token;

-- name: draw_token
-- a manual run's fencing token: a claim without a slot (job, instance, now)
INSERT INTO claims (job_id, slot, instance_id, claimed_at) VALUES (?, NULL, ?, ?)
RETURNING token;

-- name: delete_claim
DELETE FROM claims WHERE token = ?;

-- name: delete_claims
-- tokens as one JSON array
DELETE FROM claims WHERE token IN (SELECT value FROM json_each(?));

-- name: withdraw_claim
-- (token, job, slot): only that exact claim, and never one whose slot has a run row
-- (a survivor resolved it: interrupted, instance_lost)
DELETE FROM claims WHERE token = ?1 AND job_id = ?2 AND slot = ?3
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.fencing_token = ?1);

-- name: take_leases
-- ?1 instance, ?2 now, ?3 [[job, token, until], ...]: leases that are free or expired
UPDATE job_state SET lease_holder = ?1, lease_token = v.value->>1, lease_until = v.value->>2
FROM json_each(?3) AS v
WHERE job_state.job_id = v.value->>0
  AND (job_state.lease_holder IS NULL OR job_state.lease_until <= ?2)
RETURNING job_state.job_id;

-- name: lease_holders
SELECT job_id, lease_holder FROM job_state WHERE job_id IN (SELECT value FROM json_each(?));

-- name: ensure_lanes
-- ?1 job, ?2 lanes (max_instances): the rows of lanes 1..?2-1
WITH RECURSIVE n(lane) AS (SELECT 1 UNION ALL SELECT lane + 1 FROM n WHERE lane + 1 < ?2)
INSERT INTO lease_lanes (job_id, lane) SELECT ?1, lane FROM n WHERE lane < ?2
ON CONFLICT (job_id, lane) DO NOTHING;

-- name: take_lane
-- ?1 instance, ?2 now, ?3 job, ?4 token, ?5 until, ?6 lanes: the lowest free or expired
-- lane 1..?6-1 (lane 0 was busy)
UPDATE lease_lanes SET lease_holder = ?1, lease_token = ?4, lease_until = ?5
WHERE rowid = (SELECT rowid FROM lease_lanes
               WHERE job_id = ?3 AND lane < ?6
                 AND (lease_holder IS NULL OR lease_until <= ?2)
               ORDER BY lane LIMIT 1)
RETURNING lane;

-- name: lane_holders
-- ?1 job, ?2 lanes: who holds lane 0 and lanes 1..?2-1
SELECT lease_holder FROM job_state WHERE job_id = ?1 AND lease_holder IS NOT NULL
UNION
SELECT lease_holder FROM lease_lanes WHERE job_id = ?1 AND lane < ?2
  AND lease_holder IS NOT NULL;

-- name: release_lanes
-- ?1 [[job, token], ...]: fenced by token (the lanes of release_leases)
UPDATE lease_lanes SET lease_holder = NULL, lease_token = NULL, lease_until = NULL
FROM json_each(?1) AS v
WHERE lease_lanes.lease_token = v.value->>1 AND lease_lanes.job_id = v.value->>0;

-- name: renew_lanes
-- ?1 [[job, token, until], ...] (the lanes of renew_leases)
UPDATE lease_lanes SET lease_until = v.value->>2 FROM json_each(?1) AS v
WHERE lease_lanes.lease_token = v.value->>1 AND lease_lanes.job_id = v.value->>0;

-- name: release_leases
-- ?1 [[job, token], ...]: fenced by token
UPDATE job_state SET lease_holder = NULL, lease_token = NULL, lease_until = NULL
FROM json_each(?1) AS v
WHERE job_state.job_id = v.value->>0 AND job_state.lease_token = v.value->>1;

-- name: renew_leases
-- ?1 [[job, token, until], ...]
UPDATE job_state SET lease_until = v.value->>2 FROM json_each(?1) AS v
WHERE job_state.job_id = v.value->>0 AND job_state.lease_token = v.value->>1;

-- name: renew_deadlines
UPDATE runs SET deadline = v.value->>2 FROM json_each(?1) AS v
WHERE runs.job_id = v.value->>0 AND runs.fencing_token = v.value->>1
  AND runs.status = 'running';

-- name: lost_runs
-- claimed and leased (lease expired at ?), but no run row was ever written
SELECT s.job_id, s.lease_token, s.lease_holder, c.slot, c.claimed_at
FROM job_state s JOIN claims c ON c.token = s.lease_token
WHERE s.lease_token IS NOT NULL AND s.lease_until <= ?
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = s.job_id
                  AND r.fencing_token = s.lease_token);

-- name: lost_lane_runs
-- lost_runs, for lanes 1..N-1
SELECT s.job_id, s.lease_token, s.lease_holder, c.slot, c.claimed_at
FROM lease_lanes s JOIN claims c ON c.token = s.lease_token
WHERE s.lease_token IS NOT NULL AND s.lease_until <= ?
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = s.job_id
                  AND r.fencing_token = s.lease_token);

-- name: next_run_id
-- the id before the next AUTOINCREMENT one (inside BEGIN IMMEDIATE nobody else inserts)
SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'runs'), 0),
           coalesce((SELECT max(id) FROM runs), 0));

-- name: last_insert_rowid
SELECT last_insert_rowid();

-- name: insert_run
INSERT INTO runs (job_id, slot, triggered_by, status, reason, instance_id, fencing_token,
                  manual, is_catchup, is_recovery, attempt, claimed_at, started_at,
                  finished_at, deadline, result, error, logs, params, forced_by)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: finish_run
UPDATE runs SET status = ?, reason = ?, started_at = ?, finished_at = ?, deadline = ?,
                result = ?, error = ?, logs = ?, attempt = ?
WHERE id = ?;

-- name: start_runs
-- ?1 now, ?2 [[run id, deadline], ...]: pending runs whose turn came
UPDATE runs SET status = 'running', started_at = ?1, deadline = v.value->>1
FROM json_each(?2) AS v WHERE runs.id = v.value->>0 AND runs.status = 'pending';

-- name: skip_busy_runs
-- ?1 reason, ?2 now, ?3 [[run id, result, log line], ...]
UPDATE runs SET status = 'skipped', reason = ?1, finished_at = ?2, deadline = NULL,
                result = v.value->>1,
                logs = json_insert(coalesce(runs.logs, '[]'), '$[#]', v.value->>2)
FROM json_each(?3) AS v WHERE runs.id = v.value->>0;

-- name: skip_claims
-- ?1 now, ?2 [[job, slot, instance], ...]: the claim each claim-less skip takes first (a
-- slot already claimed, by a run or an earlier skip, gets no skip row: ops.record_skips)
INSERT INTO claims (job_id, slot, instance_id, claimed_at)
SELECT value->>0, value->>1, value->>2, ?1 FROM json_each(?2) WHERE true
ON CONFLICT (job_id, slot) DO NOTHING
RETURNING job_id, slot;

-- name: record_skips
-- ?1 now, ?2 [[job, slot, triggered_by, reason, instance, result, logs], ...]: the skips
-- whose claim was won (skip_claims)
INSERT INTO runs (job_id, slot, triggered_by, status, reason, instance_id, claimed_at,
                  finished_at, result, logs, dedupe)
SELECT value->>0, value->>1, value->>2, 'skipped', value->>3, value->>4, ?1, ?1,
       value->>5, value->>6, value->>3
FROM json_each(?2) WHERE true
ON CONFLICT (job_id, slot, dedupe) WHERE dedupe IS NOT NULL DO NOTHING;

-- name: reap
-- ?1 now, ?2 reason, ?3 error, ?4 || holder or ?5 || ?6: the log line (store/ledger.py)
UPDATE runs SET status = 'interrupted', reason = ?2, finished_at = ?1, deadline = NULL,
                error = ?3,
                logs = json_insert(coalesce(logs, '[]'), '$[#]',
                                   ?4 || coalesce(instance_id, ?5) || ?6)
WHERE status IN ('running', 'pending') AND deadline < ?1
  AND NOT EXISTS (SELECT 1 FROM job_state s WHERE s.job_id = runs.job_id
                  AND s.lease_token = runs.fencing_token AND s.lease_until > ?1)
  AND NOT EXISTS (SELECT 1 FROM lease_lanes s WHERE s.lease_token = runs.fencing_token
                  AND s.job_id = runs.job_id AND s.lease_until > ?1)
RETURNING id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
          is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
          result, error, logs, params, forced_by;

-- name: slot_runs
-- the slot timeline's read: the history's filters, ORDER BY and LIMIT are appended
SELECT id, slot, status, reason, manual
FROM runs;

-- name: job_slot_runs
-- find_runs narrowed to (job_id and) a timeline's fields: its filters, ORDER BY and LIMIT
-- are appended
SELECT job_id, id, slot, status, reason, manual
FROM runs;

-- name: runs
-- the history: filters (job, status, cursor), ORDER BY and LIMIT are appended
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM runs;

-- name: runs_by_id
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM runs WHERE id IN (SELECT value FROM json_each(?));

-- name: get_run
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM runs WHERE id = ?;

-- name: last_runs
-- the newest run of each job: its id from last_runs (migration 0011), then its row
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM runs WHERE id IN (SELECT l.run_id FROM json_each(?) AS v
                       JOIN last_runs l ON l.job_id = v.value);

-- name: last_slot_runs
-- last_runs narrowed to a timeline's fields (id, slot, status, reason, manual): last_runs
-- holds them, the ledger is not read
SELECT l.job_id, l.run_id, l.slot, l.status, l.reason, l.manual
FROM json_each(?) AS v JOIN last_runs l ON l.job_id = v.value;

-- name: last_slot_runs_of_note
-- every job's newest run whose slot is at or after ?1 (ms) or whose status is one of ?2:
-- a scan of last_runs (100,000 short rows: milliseconds), few rows out; the caller keeps
-- those of the jobs it asked for
SELECT job_id, run_id, slot, status, reason, manual FROM last_runs
WHERE slot >= ?1 OR status IN (SELECT value FROM json_each(?2));

-- name: schema_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);

-- name: schema_version
SELECT max(version) FROM schema_migrations;

-- name: schema_versions
-- every version applied: numbers are handed out ahead, so one may land after a higher one
SELECT version FROM schema_migrations;

-- name: migration_applied
INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?);

-- name: prune_claims_batch
-- prune_claims over one token range (short transactions; same rule: each job's claim of
-- its newest slot stays)
DELETE FROM claims WHERE token BETWEEN ? AND ? AND claimed_at < ?
  AND (slot IS NULL OR slot < (SELECT max(c.slot) FROM claims c WHERE c.job_id = claims.job_id));

-- name: prune_old_runs_batch
-- prune_old_runs over one id range: finished, older than the cut-off, not the job's newest
-- claim-less skip
DELETE FROM runs WHERE id BETWEEN ? AND ? AND finished_at < ?
  AND status NOT IN ('running', 'pending')
  AND NOT (dedupe IS NOT NULL AND id = (SELECT max(r.id) FROM runs r
                                        WHERE r.job_id = runs.job_id AND r.dedupe IS NOT NULL));

-- name: prune_crowded_jobs
-- jobs with more runs than the cap, and the id of each one's newest run beyond it
SELECT job_id, (SELECT r.id FROM runs r WHERE r.job_id = g.job_id ORDER BY r.id DESC
                LIMIT 1 OFFSET ?)
FROM (SELECT job_id FROM runs GROUP BY job_id HAVING count(*) > ?) AS g;

-- name: prune_runs_per_job_batch
-- prune_runs_per_job over one id range, given each crowded job's cut (temp.prune_cut)
DELETE FROM runs WHERE id BETWEEN ? AND ?
  AND status NOT IN ('running', 'pending')
  AND id <= (SELECT p.cut FROM temp.prune_cut p WHERE p.job_id = runs.job_id)
  AND NOT (dedupe IS NOT NULL AND id = (SELECT max(r.id) FROM runs r
                                        WHERE r.job_id = runs.job_id AND r.dedupe IS NOT NULL));

-- name: runs_by_token
-- ?1 [token, ...]: the rows those fencing tokens already have (the late-result fence)
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM runs WHERE fencing_token IN (SELECT value FROM json_each(?1));

-- name: finished_runs_by_id
-- ?1 [id, ...]: those of the rows that already hold a final outcome
SELECT id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
       is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
       result, error, logs, params, forced_by
FROM runs WHERE id IN (SELECT value FROM json_each(?1))
  AND status NOT IN ('running', 'pending');

-- name: attach_late
-- ?1 result, ?2 logs, ?3 id: a late result kept on the row that holds the slot's outcome
UPDATE runs SET result = ?1, logs = ?2 WHERE id = ?3;

-- name: instance_get
SELECT lost_at, lost_by FROM instances WHERE instance_id = ?;

-- name: instance_register
-- ?1 id, ?2 host, ?3 pid, ?4 role, ?5 version, ?6 now, ?7 plans
INSERT INTO instances (instance_id, host, pid, role, version, started_at, heartbeat_at, plans)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)
ON CONFLICT (instance_id) DO UPDATE SET host = ?2, pid = ?3, role = ?4, version = ?5,
  started_at = ?6, heartbeat_at = ?6, lost_at = NULL, lost_by = NULL, plans = ?7;

-- name: instance_beat
-- ?1 id, ?2 now, ?3 plans
UPDATE instances SET heartbeat_at = ?2, plans = ?3 WHERE instance_id = ?1 AND lost_at IS NULL;

-- name: instances_live
-- every instance not declared lost, and whether it beat at or after ?1, the cut-off
-- (live; else stale: break_lost has work)
SELECT instance_id, plans, heartbeat_at >= ?1 FROM instances WHERE lost_at IS NULL
ORDER BY instance_id;

-- name: instances_declare_lost
-- ?1 now, ?2 cut-off, ?3 the survivor
UPDATE instances SET lost_at = ?1, lost_by = ?3
WHERE lost_at IS NULL AND heartbeat_at < ?2 AND instance_id <> ?3
RETURNING instance_id, host, pid, role, version, started_at, heartbeat_at, lost_at, lost_by;

-- name: instances_all
SELECT instance_id, host, pid, role, version, started_at, heartbeat_at, lost_at, lost_by
FROM instances ORDER BY started_at, instance_id;

-- name: instance_leave
DELETE FROM instances WHERE instance_id = ?;

-- name: interrupt_lost
-- ?1 now, ?2 reason, ?3 [[instance, error, log line], ...]: open runs of lost instances
UPDATE runs SET status = 'interrupted', reason = ?2, finished_at = ?1, deadline = NULL,
                error = v.value->>1,
                logs = json_insert(coalesce(runs.logs, '[]'), '$[#]', v.value->>2)
FROM json_each(?3) AS v
WHERE runs.status IN ('running', 'pending') AND runs.instance_id = v.value->>0
RETURNING id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual,
          is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline,
          result, error, logs, params, forced_by;

-- name: leases_of
-- ?1 [instance, ...]: leases held by these instances, with the claim and whether the
-- token already has a run row
SELECT s.job_id, s.lease_token, s.lease_holder, c.slot, c.claimed_at,
       EXISTS (SELECT 1 FROM runs r WHERE r.fencing_token = s.lease_token
               AND r.job_id = s.job_id)
FROM job_state s LEFT JOIN claims c ON c.token = s.lease_token
WHERE s.lease_token IS NOT NULL AND s.lease_holder IN (SELECT value FROM json_each(?1))
UNION ALL
SELECT s.job_id, s.lease_token, s.lease_holder, c.slot, c.claimed_at,
       EXISTS (SELECT 1 FROM runs r WHERE r.fencing_token = s.lease_token
               AND r.job_id = s.job_id)
FROM lease_lanes s LEFT JOIN claims c ON c.token = s.lease_token
WHERE s.lease_token IS NOT NULL AND s.lease_holder IN (SELECT value FROM json_each(?1));

-- name: registry_of
-- the rows an instance declares (instance): job, digest
SELECT job_id, digest FROM job_registry WHERE instance_id = ?;

-- name: registry_drop
-- ?1 instance, ?2 job ids (JSON array) it no longer declares
DELETE FROM job_registry
WHERE instance_id = ?1 AND job_id IN (SELECT value FROM json_each(?2));

-- name: registry_put
-- ?1 instance, ?2 now, ?3 [[job, team, source, digest, spec], ...]: a new or changed spec
INSERT INTO job_registry (job_id, instance_id, team, source, digest, spec, declared_at, seen_at)
SELECT value->>0, ?1, value->>1, value->>2, value->>3, value->>4, ?2, ?2
FROM json_each(?3) WHERE true
ON CONFLICT (job_id, instance_id) DO UPDATE SET team = excluded.team,
  source = excluded.source, digest = excluded.digest, spec = excluded.spec,
  declared_at = excluded.declared_at, seen_at = excluded.seen_at;

-- name: registry_touch
UPDATE job_registry SET seen_at = ?2 WHERE instance_id = ?1;

-- name: registry_all
-- with the declaring instance's liveness facts (lost_at, heartbeat_at)
SELECT r.job_id, r.instance_id, r.team, r.source, r.digest, r.spec, r.declared_at,
       r.seen_at, i.lost_at, i.heartbeat_at, i.instance_id IS NOT NULL
FROM job_registry r LEFT JOIN instances i ON i.instance_id = r.instance_id
ORDER BY r.job_id, r.instance_id;

-- name: request_add
INSERT INTO requests (kind, job_id, target, payload, requested_by, requested_at)
VALUES (?, ?, ?, ?, ?, ?) RETURNING id, requested_at;

-- name: requests_open
-- ?1 instance: the untaken requests meant for it or for no instance in particular
SELECT id, job_id, target FROM requests
WHERE taken_by IS NULL AND answered_at IS NULL AND (target = ?1 OR target IS NULL)
ORDER BY id;

-- name: requests_take
-- ?1 instance, ?2 now, ?3 request ids (JSON array): those still untaken
UPDATE requests SET taken_by = ?1, taken_at = ?2
WHERE id IN (SELECT value FROM json_each(?3)) AND taken_by IS NULL AND answered_at IS NULL
RETURNING id, kind, job_id, target, payload, requested_by, requested_at, taken_by, taken_at,
          answered_at, run_id, error;

-- name: request_answer
-- ?1 id, ?2 now, ?3 run id, ?4 error, ?5 1: only if nobody took it
UPDATE requests SET answered_at = ?2, run_id = ?3, error = ?4
WHERE id = ?1 AND answered_at IS NULL AND (?5 = 0 OR taken_by IS NULL);

-- name: request_note
-- ?1 id, ?2 payload (JSON): a taken, unanswered request's progress
UPDATE requests SET payload = ?2
WHERE id = ?1 AND answered_at IS NULL AND taken_by IS NOT NULL;

-- name: request_get
SELECT id, kind, job_id, target, payload, requested_by, requested_at, taken_by, taken_at,
       answered_at, run_id, error
FROM requests WHERE id = ?;
