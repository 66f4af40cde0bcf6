-- Exports write their file once: each chunk stores its rendered rows straight into the parts of
-- the upload that becomes the file (one part per chunk, after the header's), instead of into
-- `export_parts` that the finish step then copied into an upload.

-- The upload an export is writing (made when it plans): the file itself for CSV, the CSV the
-- finish step turns into the workbook for XLSX. Cleared when the export completes.
alter table jobs add column output_upload_id uuid references uploads (id);

-- A received file's parts are 1 MiB each, so a byte range can be read from the parts it
-- covers; an export's parts are one per chunk, of any size, so its file is only ever streamed
-- whole (null here).
alter table uploads add column part_bytes integer default 1048576;

-- An export's file is never hashed whole: its parts are written in parallel.
alter table uploads alter column sha256 drop not null;

-- Exports planned the old way have their rendered rows in `export_parts`: unfinished ones plan
-- again (a running one from the start; a failed or cancelled one when it is retried).
delete from job_chunks c using jobs j
where j.id = c.job_id and j.kind = 'export' and j.status <> 'completed';
update jobs set sealed = false, chunks_total = 0, chunks_done = 0, chunks_failed = 0,
    item_count = null, item_progress = 0, rows_ok = 0, version = version + 1,
    status = case when status = 'running' then 'waiting'::job_status else status end,
    started_at = case when status = 'running' then null else started_at end
where kind = 'export' and status <> 'completed';

drop table export_parts;
