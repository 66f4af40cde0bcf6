-- Each owner's stored bytes in up to 16 rows (stripes) instead of one. Every file stored moved
-- the owner's one row from its insert to its commit, so one owner's uploads were stored one at
-- a time, each holding the row through its commit's WAL flush: `make bench ONLY=small` (one
-- owner, 16 clients) found the upload's statement waiting for the row or the flush in most
-- samples, and uploads went no faster than about 520 a second. A change now moves the stripe
-- of its transaction (its id's remainder: one stripe a transaction, so a transaction that
-- changes several of an owner's files locks one of their rows, as before, and two such cannot
-- wait for each other's); the owner's total is the sum of their stripes, read without a lock.
--
-- Processes of an earlier build read one row per owner: once an owner has two stripes, their
-- uploads fail there ("more than one row returned by a subquery"), and an upload stored while
-- this migration runs fails once the migration commits. Replace every process of the earlier build as
-- this one starts (CHANGELOG).
alter table upload_bytes add column stripe smallint not null default 0;
alter table upload_bytes drop constraint upload_bytes_pkey;
alter table upload_bytes add primary key (owner, stripe);

create or replace function upload_bytes_follow() returns trigger language plpgsql as $$
declare
    delta bigint := case tg_op
        when 'INSERT' then new.size
        when 'DELETE' then -old.size
        else new.size - old.size
    end;
    whose uuid := case tg_op when 'DELETE' then old.owner else new.owner end;
begin
    if delta <> 0 then
        insert into upload_bytes (owner, stripe, stored)
        values (whose, (txid_current() % 16)::smallint, delta)
        on conflict (owner, stripe) do update set stored = upload_bytes.stored + excluded.stored;
    end if;
    return null;
end $$;
