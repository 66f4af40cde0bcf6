-- XLSX exports are written in pieces (spreadsheet::sheet_writer): each chunk stores its rows as
-- deflated sheet XML in the export's file, and what the zip must say of them: their XML's
-- CRC-32 and length, and their deflated length. Null for every other chunk.
alter table job_chunks add column sheet_crc32 bigint, add column sheet_bytes bigint,
    add column sheet_deflated bigint;

-- XLSX exports planned the old way have CSV in their file's parts: unfinished ones plan again
-- (a running one from the start; a failed or cancelled one when it is retried) with a new file,
-- and retention removes the old one, which no job uses then.
delete from job_chunks c using jobs j
where j.id = c.job_id and j.kind = 'export' and j.format = 'xlsx' and j.status <> 'completed';
update jobs set sealed = false, chunks_total = 0, chunks_done = 0, chunks_failed = 0,
    item_count = null, item_progress = 0, rows_ok = 0, version = version + 1,
    output_upload_id = null,
    status = case when status = 'running' then 'waiting'::job_status else status end,
    started_at = case when status = 'running' then null else started_at end
where kind = 'export' and format = 'xlsx' and status <> 'completed';
