-- Workbook imports: the sheet to read and the CSV it was converted to at planning.
alter table jobs
    add column sheet text,
    -- The CSV the chunks read: the upload itself, or the sheet converted from a workbook.
    add column data_upload_id uuid references uploads (id),
    -- The sheet row of the header, for row numbers in errors (1 for CSV files).
    add column header_row bigint;

-- Export jobs: the format asked for and the file produced (stored like an upload).
alter table jobs
    add column format text check (format in ('csv', 'xlsx')),
    add column result_upload_id uuid references uploads (id);

-- An export chunk is a range of the dataset's rows by their key, both ends included.
alter table job_chunks
    add column from_job uuid,
    add column from_row bigint,
    add column to_job uuid,
    add column to_row bigint;

-- What each export chunk rendered (CSV records), until the file is assembled.
create table export_parts (
    job_id uuid not null references jobs (id) on delete cascade,
    chunk_no integer not null,
    data bytea not null,
    primary key (job_id, chunk_no)
);
