-- The operations console (docs/architecture.md, "The job list at scale").

-- Counts of jobs per owner, kind and status, kept in step with `jobs` without a hot row: every
-- change appends a delta (appends never wait on each other), and maintenance folds the deltas
-- into `job_counts` and `job_count_totals` (one writer: no contention, no deadlock). A count
-- is the folded value plus the deltas not folded yet, read in one statement: exact at every
-- snapshot.
create table job_counts (
    owner uuid not null,
    kind job_kind not null,
    status job_status not null,
    n bigint not null,
    primary key (owner, kind, status)
);
create table job_count_totals (
    kind job_kind not null,
    status job_status not null,
    n bigint not null,
    primary key (kind, status)
);
create table job_count_deltas (
    owner uuid not null,
    kind job_kind not null,
    status job_status not null,
    n bigint not null
);

create function jobs_count_inserted() returns trigger language plpgsql as $$
begin
    insert into job_count_deltas (owner, kind, status, n)
    select owner, kind, status, count(*) from inserted group by owner, kind, status;
    return null;
end $$;

create function jobs_count_deleted() returns trigger language plpgsql as $$
begin
    insert into job_count_deltas (owner, kind, status, n)
    select owner, kind, status, -count(*) from deleted group by owner, kind, status;
    return null;
end $$;

-- A job's owner and kind never change; its status does, one row at a time (or a few, in a bulk
-- action), so a row trigger that fires only on a change of status costs nothing elsewhere.
create function jobs_count_moved() returns trigger language plpgsql as $$
begin
    insert into job_count_deltas (owner, kind, status, n)
    values (old.owner, old.kind, old.status, -1), (new.owner, new.kind, new.status, 1);
    return null;
end $$;

create trigger jobs_counted_insert after insert on jobs
    referencing new table as inserted for each statement execute function jobs_count_inserted();
create trigger jobs_counted_delete after delete on jobs
    referencing old table as deleted for each statement execute function jobs_count_deleted();
create trigger jobs_counted_update after update of status on jobs
    for each row when (old.status is distinct from new.status)
    execute function jobs_count_moved();

insert into job_counts (owner, kind, status, n)
select owner, kind, status, count(*) from jobs group by owner, kind, status;
insert into job_count_totals (kind, status, n)
select kind, status, count(*) from jobs group by kind, status;

-- The list's filters, each with the list's order after it so a page is an index range.
create index jobs_by_status on jobs (status, created_at desc, id desc);
create index jobs_by_owner_status on jobs (owner, status, created_at desc, id desc);
create index jobs_by_dataset on jobs (dataset_id, created_at desc, id desc);
create index jobs_with_row_errors on jobs (created_at desc, id desc) where rows_failed > 0;

-- Search by file name: the name is kept on the job from its creation (it was copied there
-- only when retention removed the upload), with a trigram index for "contains".
create extension if not exists pg_trgm;
update jobs j set source_filename = u.filename
from uploads u where u.id = j.upload_id and j.source_filename is null;
create index jobs_by_filename on jobs using gin (source_filename gin_trgm_ops);
create index datasets_by_name on datasets using gin (name gin_trgm_ops);

-- Who did what to many jobs at once.
create type bulk_action as enum ('cancel', 'retry');
create table audit_log (
    id bigint generated always as identity primary key,
    at timestamptz not null default now(),
    -- Who acted: kept as an email too, since a guest's account goes when retention removes it.
    actor uuid references users (id) on delete set null,
    actor_email text,
    action bulk_action not null,
    -- {"ids": [...]} or {"filter": "<query string>"}, as asked.
    selection jsonb not null,
    -- Jobs selected when the action began, and those it changed so far (bumped with each batch,
    -- in the batch's transaction).
    matched bigint not null,
    changed bigint not null default 0,
    finished_at timestamptz,
    -- Why it stopped before it was through, if it did.
    error text
);
