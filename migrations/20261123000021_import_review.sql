-- Import review (issue 13): how a job reads its file when the person said so (header row,
-- delimiter, encoding) and which dataset column each file column fills. Null: as found.
alter table jobs
    add column reading jsonb,
    add column mapping jsonb,
    -- A dry run (`jobType: "validate"`): an import that reads, checks and counts every row and
    -- reports its errors, but writes no row and changes no dataset.
    add column dry_run boolean not null default false,
    -- The import whose error report (fixed) this import reads.
    add column fixes uuid references jobs (id) on delete set null;

-- Deleting a job (retention) sets `fixes` to null in the imports that fixed it: found by this,
-- not by a scan of every job.
create index jobs_fixes on jobs (fixes) where fixes is not null;

-- The mappings used before for a dataset, newest first, suggest the next one's.
create index jobs_mapping_by_dataset on jobs (dataset_id, created_at desc) where mapping is not null;

-- Every problem of a row, when it has more than one (`message` joins them; `column_name` and
-- `value` are the first's).
alter table job_errors add column problems jsonb;
