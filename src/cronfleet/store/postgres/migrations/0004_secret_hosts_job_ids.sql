-- cronfleet schema v4 (security): the hosts a secret may be sent to, and the team each
-- job id belongs to. Applied inside the store's schema (search_path is set to it).
--
-- secrets.hosts: a JSON list of host names ("api.example.com", "*.example.com"); NULL
-- means no hosts (usable only by admins' jobs and config tasks).
-- job_ids: every id a config or code job has used, with its team, so that no other team
-- can take the id over the API (and read the runs left under it).
-- job_defs.saved_role: the role of the token that last saved a stored job (an editor's job
-- may only send secrets to their hosts).
ALTER TABLE secrets ADD COLUMN IF NOT EXISTS hosts TEXT;

CREATE TABLE IF NOT EXISTS job_ids (
    id          TEXT   PRIMARY KEY,
    team        TEXT   NOT NULL,
    source      TEXT   NOT NULL,
    reserved_at BIGINT NOT NULL
);

ALTER TABLE job_defs ADD COLUMN IF NOT EXISTS saved_role TEXT;
