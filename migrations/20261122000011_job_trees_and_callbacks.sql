-- Job trees: a `batch` job is a parent; imports and exports created with its id are its
-- children. It completes once it is sealed (no more children) and every child has ended:
-- `completed` if they all completed, else `failed`. The reaper settles parents.
alter table jobs drop constraint jobs_kind_check;
alter table jobs add constraint jobs_kind_check check (kind in ('import', 'export', 'batch'));
alter table jobs add column parent_id uuid references jobs (id) on delete cascade;
create index jobs_children on jobs (parent_id) where parent_id is not null;

-- Completion callbacks: once a job with a `callback_url` has ended, its final state is POSTed
-- there until a 2xx answer is recorded (`callback_delivered_at`), then never again. Each try
-- claims the job for `callback_next_at` (so two processes never send at once) and, failing,
-- backs off.
alter table jobs
    add column callback_url text,
    add column callback_attempts integer not null default 0,
    add column callback_next_at timestamptz,
    add column callback_delivered_at timestamptz,
    add column callback_error text;
create index jobs_callbacks_due on jobs (callback_next_at)
    where callback_url is not null and callback_delivered_at is null;
