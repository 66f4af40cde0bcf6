-- `Idempotency-Key` (or `dedupeKey`): a repeated create with the same key, by the same owner,
-- returns the job the first one made.
alter table jobs add column dedupe_key text;
create unique index jobs_dedupe_key on jobs (owner, dedupe_key) where dedupe_key is not null;

-- Jobs with the same serialize key start one at a time, in creation order (imports and exports
-- of a dataset default to `dataset:<name>`): a job waits while an earlier one with its key is
-- waiting or running.
alter table jobs add column serialize_key text;
create index jobs_serialized on jobs (serialize_key, created_at, id)
    where serialize_key is not null and status in ('waiting', 'running');
