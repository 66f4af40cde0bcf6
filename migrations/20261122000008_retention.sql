-- Retention (server/src/store/retention.rs): a finished job's items (chunks, row errors, export
-- parts, its files) go after some days, the job's summary later. A summary whose items are
-- gone keeps the source file's name, and can no longer be retried.
alter table jobs
    add column items_pruned_at timestamptz,
    add column source_filename text;

create index jobs_finished on jobs (finished_at) where finished_at is not null;
