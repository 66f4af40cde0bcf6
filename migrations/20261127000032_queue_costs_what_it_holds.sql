-- apalis's queue, adapted so that each task costs the same however many messages the queue
-- keeps. apalis's migrations run before ours (`db::migrate`), so its tables exist here; a bump
-- of apalis-postgres must check this again (`schema_pins` fails if the fetch or the trigger
-- below is gone).
--
-- The strongest lock this needs (dropping indexes), taken first: taken last, it could deadlock
-- with a process of the previous build that reads the queue and then writes to it.
lock table apalis.jobs in access exclusive mode;

-- 1. Two of apalis's indexes repeat others (its first migration's, kept by later ones):
--    `unique_job_id` is the primary key's, `lidx` is `idx_apalis_jobs_lock_by`'s. Every message
--    written (queued, fetched, acknowledged) wrote both twice.
drop index apalis.unique_job_id;
drop index apalis.lidx;

-- 2. A message apalis is done with lets go of its worker. apalis leaves the worker's name in
--    `lock_by` once a message is done, and finds messages by `lock_by` when it acknowledges a
--    task (`handle_result.sql`) and when, at every worker's heartbeat, it looks for a dead
--    worker's messages (`reenqueue_orphaned.sql`). Each read every message its worker (or
--    every dead worker) had ever run, and done messages are kept for
--    CONVEYOR_RETAIN_ITEMS_DAYS (7): an acknowledgement took 1.1 ms with 2,500 done messages per worker (0.27 ms without them), and
--    its mean grew to 1.63 ms over one 10,000-job `make bench ONLY=small` run (4 workers), the
--    costliest statement of a small job after its rows' `COPY`. The search for a dead worker's
--    messages, which every worker runs at every heartbeat, read the done messages of every
--    worker that had ever stopped: 353 ms with 200,000 of them from 40 stopped workers (a week
--    of deploys), 0.17 ms once they let go. Only a queued or running message keeps its worker.
--    (apalis's `task-tracking` feature, off here, would count a worker's acknowledged messages
--    by `lock_by` at each heartbeat: it must stay off with this trigger.) Messages done before
--    this migration keep their worker until retention deletes them: rewriting a week of them
--    here would hold the whole queue for as long.
create function message_lets_go_of_its_worker() returns trigger
language plpgsql as $$
begin
    new.lock_by := null;
    return new;
end $$;

create trigger messages_let_go_of_their_workers
    before update on apalis.jobs
    for each row when (new.status not in ('Queued', 'Running') and new.lock_by is not null)
    execute function message_lets_go_of_its_worker();

-- 3. The fetch is planned once per connection. apalis-postgres 1.0 made `get_jobs` a `LANGUAGE
--    sql` function, whose statement PostgreSQL (15) plans anew on every call (0.35 ms of planning
--    per task in the same run, beside 0.25 ms executing it). The same statement, from PL/pgSQL,
--    keeps its plan.
create or replace function apalis.get_jobs(
    worker_id text,
    v_job_type text,
    v_job_count integer default 5
)
returns setof apalis.jobs
language plpgsql
volatile
as $$
begin
    return query
    with jobs as (
        select id
        from apalis.jobs
        where (status = 'Pending' or (status = 'Failed' and attempts < max_attempts))
          and run_at < now()
          and job_type = v_job_type
        order by priority desc, run_at asc
        limit v_job_count
        for update skip locked
    )
    update apalis.jobs j
    set status = 'Queued', lock_by = worker_id, lock_at = now()
    from jobs
    where j.id = jobs.id
    returning j.*;
end $$;
