-- "Earlier" among jobs with the same serialize key is the job sequence number: creates with
-- one key take an advisory lock, so their sequence numbers follow commit order (creation times
-- are transaction start times, which need not).
drop index jobs_serialized;
create index jobs_serialized on jobs (serialize_key, seq)
    where serialize_key is not null and status in ('waiting', 'running');
