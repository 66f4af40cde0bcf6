-- Queue health (docs/architecture.md, "Queue health"): the worker processes, and what the
-- page's charts read by time.

-- Each `server worker` (or `serve` with workers) process while it runs: written when it starts,
-- `seen_at` renewed every heartbeat, `stopped_at` set when it stops cleanly. A process that
-- misses three heartbeats (`beat_secs`) without stopping is gone. `process` is the prefix of its
-- lease owners (`<process>/<random>`, `job_runs.run`). Rows not seen for a day are deleted by
-- the processes still beating.
create table worker_processes (
    process text primary key,
    host text not null,
    pid integer not null,
    slots integer not null,
    beat_secs double precision not null,
    started_at timestamptz not null default now(),
    seen_at timestamptz not null default now(),
    stopped_at timestamptz
);

-- The job due longest without a worker: waiting jobs by when they became due (creation, or
-- a retry).
create index jobs_waiting_by_due on jobs (run_after) where status = 'waiting';
-- Rows processed per minute: chunks by the time they were done.
create index job_chunks_by_done_at on job_chunks (done_at) where done_at is not null;
-- Jobs finished per minute, and the failure rate: changes of status by time.
create index job_transitions_by_at on job_transitions (at);
-- Reaper rescues per minute: runs ended as lost by time (few).
create index job_runs_lost_by_end on job_runs (ended_at) where outcome = 'lost';
