-- Jobs of registered types (issue 14): a job of kind `items` names its type and holds items,
-- which workers in any language claim over HTTP. Items count as a sealed plan's chunks do:
-- `chunks_total` is the items known, `chunks_done`/`chunks_failed` those ended.
alter type job_kind add value 'items';
alter table jobs add column job_type text references job_types (name);

create table job_items (
    job_id uuid not null references jobs (id) on delete cascade,
    -- 1, 2, 3… in the order they were added (a duplicate's number is skipped).
    item_no bigint not null,
    payload jsonb not null,
    -- Unique within the job: an item added again with its key is not added twice.
    dedupe_key text,
    state chunk_state not null default 'pending',
    attempts integer not null default 0,
    run_after timestamptz not null default now(),
    -- The claim that holds it: a result is taken only from its current assignment.
    assignment uuid,
    worker text,
    lease_expires_at timestamptz,
    result jsonb,
    -- [{"message","at","worker"}], one per failed attempt.
    failures jsonb not null default '[]',
    done_at timestamptz,
    primary key (job_id, item_no)
);
create unique index job_items_dedupe on job_items (job_id, dedupe_key) where dedupe_key is not null;
create index job_items_pending on job_items (job_id, item_no) where state = 'pending';
