-- Job types (issue 14): kinds of work other services run on the engine, registered by name with
-- their defaults. A job of a type holds items that workers in any language claim over HTTP.
create table job_types (
    -- `payroll.run`, `video-render`: lower case, digits, `.`, `_`, `-`; not a built-in kind.
    name text primary key check (name ~ '^[a-z][a-z0-9_.-]{0,62}$'),
    -- How long a claimed item is a worker's before another may take it, unless heartbeats
    -- renew it.
    lease_seconds integer not null check (lease_seconds between 5 and 3600),
    max_failures_per_item integer not null check (max_failures_per_item between 1 and 100),
    -- The wait before a failed item's next attempt, doubled at each attempt.
    backoff_seconds integer not null check (backoff_seconds between 0 and 3600),
    -- The items of a job run one at a time, in the order they were added.
    ordered boolean not null,
    -- How long a finished job of this type is kept (the deployment's default when null).
    retain_days integer check (retain_days between 1 and 3650),
    -- The type of the job each succeeded item's result starts an item of.
    follow_up text references job_types (name),
    max_payload_bytes integer not null check (max_payload_bytes between 1 and 1048576),
    created_by uuid references users (id) on delete set null,
    created_at timestamptz not null default now(),
    check (follow_up is distinct from name)
);
