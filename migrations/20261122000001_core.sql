-- Conveyor's own tables. apalis keeps its queue in schema `apalis` with its own migration table.
-- `owner` is the browser session that created the row (per-user isolation builds on it).

create table uploads (
    id uuid primary key,
    owner text not null,
    filename text not null,
    content_type text,
    size bigint not null,
    sha256 bytea not null,
    created_at timestamptz not null default now()
);

-- The bytes, in fixed-size parts so any node can stream or slice them.
create table upload_parts (
    upload_id uuid not null references uploads (id) on delete cascade,
    part_no integer not null,
    data bytea not null,
    primary key (upload_id, part_no)
);

create table datasets (
    id uuid primary key,
    owner text not null,
    name text not null unique,
    -- [{"name","type","required"}]: declared by POST /api/datasets, or taken (all text) from
    -- the header of the first import; '[]' until then.
    columns jsonb not null default '[]',
    -- The column whose value identifies a row: a re-import updates the row with that value.
    key text,
    created_at timestamptz not null default now()
);

create table jobs (
    id uuid primary key,
    kind text not null check (kind in ('import', 'export')),
    status text not null default 'waiting'
        check (status in ('waiting', 'running', 'completed', 'failed', 'cancelled')),
    owner text not null,
    upload_id uuid references uploads (id),
    dataset_id uuid references datasets (id),
    -- How chunks read rows, decided by the plan step: {"delimiter", "columns" (the dataset
    -- column of each header cell, in file order), "key" (index of the key column)}.
    row_format jsonb,
    item_count bigint,
    item_progress bigint not null default 0,
    rows_ok bigint not null default 0,
    rows_failed bigint not null default 0,
    -- Of rows_ok, those that replaced a row with the same key.
    rows_updated bigint not null default 0,
    chunks_total integer not null default 0,
    chunks_done integer not null default 0,
    -- True once every chunk is recorded: only then can the last chunk complete the job.
    sealed boolean not null default false,
    version bigint not null default 1,
    error text,
    created_at timestamptz not null default now(),
    started_at timestamptz,
    finished_at timestamptz
);

create index jobs_newest_first on jobs (created_at desc, id desc);

create table job_chunks (
    job_id uuid not null references jobs (id) on delete cascade,
    chunk_no integer not null,
    -- Data rows `first_row .. first_row + row_count` (1 = the first row after the header),
    -- stored at bytes `byte_start .. byte_end` of the upload.
    first_row bigint not null,
    row_count integer not null,
    byte_start bigint not null,
    byte_end bigint not null,
    state text not null default 'pending' check (state in ('pending', 'done')),
    done_at timestamptz,
    primary key (job_id, chunk_no)
);

-- One line of the error report: a row that could not be imported, with its original fields.
create table job_errors (
    job_id uuid not null references jobs (id) on delete cascade,
    row_no bigint not null,
    column_name text,
    value text,
    message text not null,
    fields jsonb not null default '[]'
);

create index job_errors_by_job on job_errors (job_id, row_no);

-- Imported rows. The key makes a second write of the same source row impossible, on top of the
-- chunk done-gate; job ids are UUIDv7, so the key also orders rows by import, then by file order.
create table dataset_rows (
    dataset_id uuid not null references datasets (id) on delete cascade,
    job_id uuid not null,
    row_no bigint not null,
    -- The key column's value (as JSON text) in datasets that have a key.
    key text,
    data jsonb not null,
    primary key (dataset_id, job_id, row_no)
);

create unique index dataset_rows_by_key on dataset_rows (dataset_id, key) where key is not null;
