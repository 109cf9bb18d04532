-- cronfleet schema v13 for PostgreSQL: the catalog's change feed. Every write of a job definition
-- already takes the next store-wide version (max + 1, one catalog writer at a time), so
-- the definitions changed after a version are read in (version, id) keyset pages through
-- this index (store/sql_side.py job_defs_changed); it replaces the one on version alone.
-- An existing database needs no other change: every row already has its version.
CREATE INDEX IF NOT EXISTS job_defs_change ON job_defs (version, id);
DROP INDEX IF EXISTS job_defs_version;
