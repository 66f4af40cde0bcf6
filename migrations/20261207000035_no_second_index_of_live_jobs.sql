-- `jobs_open` (id) and `jobs_live_by_owner` (owner, id) hold the same rows: the live jobs.
-- Every job is inserted live, so each wrote an entry in both. The queries that read all live
-- jobs (lease rescue, steps to queue again, batches to settle) were already planned on
-- `jobs_live_by_owner` with both present (EXPLAIN on the small bench's database, 3,000 live
-- jobs among 230,000), and nothing reads live jobs by id alone.
drop index if exists jobs_open;
