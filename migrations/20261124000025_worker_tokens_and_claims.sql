-- External workers (issue 14): tokens bound to job types, and what claims need.

-- A worker token opens the worker routes (claims, heartbeats, results, failures) for items of
-- its types, and nothing else. Admins create them; the token is shown once, kept as SHA-256.
create table worker_tokens (
    id uuid primary key default gen_random_uuid(),
    name text not null check (length(name) between 1 and 100),
    types text[] not null check (cardinality(types) between 1 and 50),
    token_hash bytea not null unique,
    created_by uuid references users (id) on delete set null,
    created_at timestamptz not null default now(),
    last_used_at timestamptz
);

-- A claim looks for live jobs of its types, oldest first.
create index jobs_live_by_type on jobs (job_type, seq)
    where job_type is not null and status in ('waiting', 'running');
-- Results, heartbeats and failures find their item by its (last) assignment.
create unique index job_items_assignment on job_items (assignment) where assignment is not null;
-- Lease rescue finds the items whose lease expired.
create index job_items_leased on job_items (lease_expires_at) where lease_expires_at is not null;
-- A claim that found nothing waits until the next item in backoff is due (only an item tried
-- before can be in backoff).
create index job_items_backoff on job_items (run_after) where state = 'pending' and attempts > 0;
