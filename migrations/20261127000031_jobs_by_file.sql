-- The jobs that name each file. Retention deletes the files no job names: finding them tested
-- every job's three file columns for each file, and deleting one made its three foreign keys'
-- checks read every job too. With 300,000 jobs, a round's 100 files took 6.5 s to find and 22 s
-- to delete (30 ms with these), holding their owner's total of stored bytes, which every part
-- an upload of theirs stores waits for. A job's files are cleared when retention prunes its
-- items, so each index holds only the jobs that still keep a file.
create index jobs_by_upload on jobs (upload_id) where upload_id is not null;
create index jobs_by_result_upload on jobs (result_upload_id) where result_upload_id is not null;
create index jobs_by_output_upload on jobs (output_upload_id) where output_upload_id is not null;
