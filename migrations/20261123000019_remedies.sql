-- Retry only where it helps (docs/architecture.md, "A job's history"), and what migration 17
-- left out.

-- A failure another attempt would repeat carries what fixes it (`app::model::Remedy`, as
-- JSON); such a job is never retried, so it keeps it (until retention deletes what the fix
-- needs: its upload).
alter table jobs add column remedy jsonb;

-- Runs still open, by item, for lease rescue (by run, `job_runs_open`, for their worker and for
-- the acquire that takes an expired lease over). A run is ended as lost by either when its
-- worker is gone; one whose job ended before either came reads as lost once its lease has
-- expired (`store::history`).
create index job_runs_open_items on job_runs (job_id, chunk_no) where ended_at is null;
