-- Crash-proof work (docs/architecture.md, "Leases and the reaper"). A work item is a chunk
-- (`job_chunks`) or a job's own step (`jobs`: the plan, or an export's finish). Each carries:
--   ticket            the idempotency key of the item's current queue message, so the reaper
--                     can tell whether a live message for it exists in `apalis.jobs`;
--   attempts          runs started (a lease taken), capped by the job's max_failures_per_item;
--   run_after         not before then (exponential backoff with jitter after a failure);
--   lease_owner       who runs it now (unique per run), renewed by heartbeats until
--   lease_expires_at  after which the item is free again for any worker;
--   last_error        why the last attempt failed.

alter table job_chunks
    add column ticket uuid not null default gen_random_uuid(),
    add column attempts integer not null default 0,
    add column run_after timestamptz not null default now(),
    add column lease_owner text,
    add column lease_expires_at timestamptz,
    add column last_error text;

alter table job_chunks drop constraint job_chunks_state_check;
alter table job_chunks add constraint job_chunks_state_check
    check (state in ('pending', 'done', 'failed'));

-- The reaper's scans: unfinished chunks only.
create index job_chunks_open on job_chunks (job_id, chunk_no) where state = 'pending';

alter table jobs
    add column ticket uuid not null default gen_random_uuid(),
    add column attempts integer not null default 0,
    add column run_after timestamptz not null default now(),
    add column lease_owner text,
    add column lease_expires_at timestamptz,
    add column last_error text,
    add column chunks_failed integer not null default 0,
    add column max_failures_per_item integer not null default 5
        check (max_failures_per_item between 1 and 100),
    -- Stop the job once more rows than this failed (a count, or a percentage of the rows).
    add column max_row_errors bigint check (max_row_errors >= 0),
    add column max_row_errors_percent numeric check (max_row_errors_percent between 0 and 100);

create index jobs_open on jobs (id) where status in ('waiting', 'running');

-- Failed chunks are listed with every view of their job.
create index job_chunks_failed on job_chunks (job_id, chunk_no) where state = 'failed';
