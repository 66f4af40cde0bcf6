-- A workbook's sheet now streams from the converter straight into chunks, which are recorded
-- as they are written: no converted CSV is stored, and the header row lives in `row_format`.
--
-- Workbook imports planned the old way (chunks reading a stored converted CSV) that are not
-- complete are re-planned the new way: their chunks not yet done go, and the next run of their
-- plan (the reaper queues it for a running job; a retry for a failed or cancelled one) streams
-- the sheet again and skips the chunks done, after checking they were cut the same way.
with old as (
    select id from jobs
    where data_upload_id is not null and status <> 'completed' and items_pruned_at is null
), unfinished as (
    delete from job_chunks c using old where c.job_id = old.id and c.state <> 'done'
)
update jobs j set sealed = false, chunks_total = 0, chunks_failed = 0
from old where j.id = old.id;

alter table jobs drop column data_upload_id, drop column header_row;
