-- A job's history for operators (docs/architecture.md, "A job's history"): every run of its
-- items, and every change of its status.

-- `lost`: its worker stopped renewing the lease (ended by lease rescue).
create type run_outcome as enum ('ok', 'retry', 'refused', 'stopped', 'lost');

-- One run: a lease taken on a job's step (chunk_no null) or one of its chunks. `run` is the
-- lease owner (`<process>/<random>`, new for each run): the worker process is its prefix. Written
-- by the statement that takes the lease; ended by its worker, or by lease rescue when the
-- worker is gone. Deleted with the job's other items (retention).
create table job_runs (
    id bigint generated always as identity primary key,
    run text not null,
    job_id uuid not null references jobs (id) on delete cascade,
    chunk_no integer,
    attempt integer not null,
    started_at timestamptz not null default now(),
    ended_at timestamptz,
    outcome run_outcome,
    error text
);
create index job_runs_of_job on job_runs (job_id, started_at);
create index job_runs_open on job_runs (run) where ended_at is null;

-- Each change of a job's status (its creation is `jobs.created_at`), by a row trigger that
-- fires only on a change, so other updates of a job (progress) cost nothing more.
create table job_transitions (
    id bigint generated always as identity primary key,
    job_id uuid not null references jobs (id) on delete cascade,
    at timestamptz not null default clock_timestamp(),
    from_status job_status not null,
    to_status job_status not null
);
create index job_transitions_of_job on job_transitions (job_id, id);

create function jobs_transition_recorded() returns trigger language plpgsql as $$
begin
    insert into job_transitions (job_id, from_status, to_status)
    values (new.id, old.status, new.status);
    return null;
end $$;

create trigger jobs_transitions after update of status on jobs
    for each row when (old.status is distinct from new.status)
    execute function jobs_transition_recorded();
