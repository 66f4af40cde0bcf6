-- How long a finished job's items (or summary) are kept: `deployment` seconds, unless the job
-- is of a registered type that says how many days its jobs are kept (issue 14). A function, so
-- retention's statements say it once; stable, as it reads `job_types`, which never change.
-- Retention asks it once per type, and reads each type's finished jobs as a range of an index
-- (jobs of no type keep theirs on `jobs_finished`).
create function kept_for(job_type text, deployment double precision) returns interval
language sql stable as $$
    select make_interval(secs => coalesce(
        (select t.retain_days * 86400.0 from job_types t where t.name = job_type),
        deployment))
$$;

-- Bytes of item payloads a job holds (issue 14): an owner's items count against their stored
-- bytes limit, summed over the jobs whose items are kept.
alter table jobs add column item_bytes bigint not null default 0;
create index jobs_item_bytes_by_owner on jobs (owner) where item_bytes > 0 and items_pruned_at is null;

-- Retention, type by type: finished jobs whose items are kept, and all finished jobs.
create index jobs_items_kept_by_type on jobs (job_type, finished_at)
    where job_type is not null and items_pruned_at is null and finished_at is not null;
create index jobs_finished_by_type on jobs (job_type, finished_at)
    where job_type is not null and finished_at is not null;
