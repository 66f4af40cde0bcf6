-- Owners take turns (store::queue::Priority): a task is ranked by how many of its owner's live
-- jobs are ahead of its job, counted over this index in id (creation) order. It serves the
-- per-owner count of live jobs as the index it replaces did.
create index jobs_live_by_owner on jobs (owner, id) where status in ('waiting', 'running');
drop index jobs_active_by_owner;

-- Turns count down from 1,000,000 and reruns go above it: lift the messages queued before
-- (0 for new work, 1 for reruns) so they keep their place. apalis's tables are made after
-- ours on a new database, which has none to lift.
do $$
begin
    if to_regclass('apalis.jobs') is not null then
        update apalis.jobs set priority = priority + 1000000
        where job_type = 'conveyor' and priority in (0, 1);
    end if;
end $$;
