-- An upload is stored part by part as it arrives, each part in its own short transaction (a
-- slow client never holds a transaction or a pooled connection while we wait for its bytes).
-- Until its last part is in, it is `receiving`: invisible to jobs, counted against its owner's
-- limits while `alive_at` (bumped with every part, and every minute) is recent, and removed by
-- retention if its sender never finished.
alter table uploads
    add column receiving boolean not null default false,
    add column alive_at timestamptz not null default now();

create index uploads_receiving on uploads (owner) where receiving;
-- The owner's stored bytes and active jobs are counted at every upload and job creation.
create index jobs_active_by_owner on jobs (owner) where status in ('waiting', 'running');

-- Completion callbacks are tried until a 2xx or until a horizon after the job ended (no longer
-- a fixed number of tries); each try is recorded, and shown with the job.
alter table jobs add column callback_gave_up_at timestamptz;
-- Callbacks the old rule (ten tries) had given up on stay given up.
update jobs set callback_gave_up_at = coalesce(callback_next_at, finished_at, now())
where callback_url is not null and callback_delivered_at is null and callback_attempts >= 10;
create table callback_attempts (
    job_id uuid not null references jobs (id) on delete cascade,
    attempt integer not null,
    at timestamptz not null default now(),
    -- The HTTP status answered, or null when none came (a refused address, a timeout…).
    status integer,
    error text,
    primary key (job_id, attempt)
);
drop index jobs_callbacks_due;
create index jobs_callbacks_due on jobs (callback_next_at)
    where callback_url is not null and callback_delivered_at is null
      and callback_gave_up_at is null;
-- The last error is the last try's.
alter table jobs drop column callback_error;
