-- Import review (issue 13): how a job reads its file when the person said so (header row,
-- delimiter, encoding) and which dataset column each file column fills. Null: as found.
alter table jobs
    add column reading jsonb,
    add column mapping jsonb;

-- The mappings used before for a dataset, newest first, suggest the next one's.
create index jobs_mapping_by_dataset on jobs (dataset_id, created_at desc) where mapping is not null;
