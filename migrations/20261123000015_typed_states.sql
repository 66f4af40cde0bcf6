-- Job status, job kind, export format and chunk state become PostgreSQL enums, mirrored by
-- Rust enums (`sqlx::Type`): a misspelt state is an error, not a query that matches nothing.
-- The partial indexes that name states are dropped and made again over the typed columns.
drop index jobs_open, jobs_active_by_owner, jobs_serialized, job_chunks_open, job_chunks_failed;

alter table jobs drop constraint jobs_kind_check,
    drop constraint jobs_status_check,
    drop constraint jobs_format_check;
alter table job_chunks drop constraint job_chunks_state_check;

create type job_kind as enum ('import', 'export', 'batch');
create type job_status as enum ('waiting', 'running', 'completed', 'failed', 'cancelled');
create type export_format as enum ('csv', 'xlsx');
create type chunk_state as enum ('pending', 'done', 'failed');

alter table jobs alter column status drop default;
alter table jobs
    alter column kind type job_kind using kind::job_kind,
    alter column status type job_status using status::job_status,
    alter column format type export_format using format::export_format;
alter table jobs alter column status set default 'waiting';

alter table job_chunks alter column state drop default;
alter table job_chunks alter column state type chunk_state using state::chunk_state;
alter table job_chunks alter column state set default 'pending';

create index jobs_open on jobs (id) where status in ('waiting', 'running');
create index jobs_active_by_owner on jobs (owner) where status in ('waiting', 'running');
create index jobs_serialized on jobs (serialize_key, seq)
    where serialize_key is not null and status in ('waiting', 'running');
create index job_chunks_open on job_chunks (job_id, chunk_no) where state = 'pending';
create index job_chunks_failed on job_chunks (job_id, chunk_no) where state = 'failed';
