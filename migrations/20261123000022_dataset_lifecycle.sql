-- A dataset's life (issue 13): it comes into being when declared (`POST /api/datasets`) or
-- when an import into it completes; until then it is `provisional`: nobody sees it, and a
-- later import that finds no live job on it starts a fresh one. Deleting one makes it
-- `deleted` at once (its name is free again) and a `delete` job removes its rows; the row
-- stays as long as jobs name it.
create type dataset_state as enum ('provisional', 'ready', 'deleted');

alter table datasets
    add column state dataset_state not null default 'ready',
    -- Its columns and key were declared (`POST /api/datasets`, or `newDataset` with the import
    -- that makes it), not taken from a file's header: a new import that takes over a
    -- provisional one keeps them.
    add column declared boolean not null default false,
    -- Maintained by every write of rows, in the same transaction: exact, and free to read.
    add column row_count bigint not null default 0;

update datasets d set row_count = (select count(*) from dataset_rows r where r.dataset_id = d.id);

-- What failed or abandoned imports left (the empty datasets nothing could delete): provisional
-- until an import into them completes. Only datasets an import made (in its own transaction,
-- so at the same `now()`) and no import filled; a declared one stays.
update datasets d set state = 'provisional'
where row_count = 0
  and exists (select 1 from jobs j
              where j.dataset_id = d.id and j.kind = 'import' and j.created_at = d.created_at)
  and not exists (select 1 from jobs j
                  where j.dataset_id = d.id and j.kind = 'import' and j.status = 'completed'
                    and not j.dry_run);

-- Names are unique among the datasets that are not deleted.
alter table datasets drop constraint datasets_owner_name;
create unique index datasets_owner_name on datasets (owner, name) where state <> 'deleted';

-- The keys a keyed dry run has met so far: a key repeated across its chunks counts as the
-- import would count it, new once and then replacing. Deleted with the job's items.
create table dry_run_keys (
    job_id uuid not null references jobs (id) on delete cascade,
    key text not null,
    primary key (job_id, key)
);

-- A `delete` job removes a deleted dataset's rows, with progress.
alter type job_kind add value 'delete';
