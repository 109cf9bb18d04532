-- cronfleet schema v14 for SQLite: a team's job definitions in id order. GET /api/jobs,
-- the dashboard's jobs list and `cronfleet jobs` read API jobs in keyset pages of
-- (team, id) (store/sql_side.py job_defs_page: ids after a cursor, or in a prefix's
-- range) and count a team's live ones through this index (deleted_at in it: covering).
CREATE INDEX IF NOT EXISTS job_defs_team ON job_defs (team, id, deleted_at);
