-- What each owner's files take, kept up to date by the uploads themselves. The stored-bytes
-- limit is checked when an upload begins and with every part it stores, and summing the
-- owner's uploads there read every upload they keep each time: an owner with 10,000 files
-- paid a scan of 10,000 rows per part (`make bench ONLY=small` makes that many).
create table upload_bytes (
    owner uuid primary key references users (id) on delete cascade,
    stored bigint not null
);

-- No upload may change between the totals read here and the trigger that follows them (other
-- processes may be running while this one migrates).
lock table uploads in share row exclusive mode;

insert into upload_bytes (owner, stored)
select owner, sum(size) from uploads group by owner;

-- A change of an upload's size (made, grown part by part, sealed, deleted) moves its owner's
-- total by as much. Uploads never change owner.
create function upload_bytes_follow() returns trigger language plpgsql as $$
declare
    delta bigint := case tg_op
        when 'INSERT' then new.size
        when 'DELETE' then -old.size
        else new.size - old.size
    end;
    whose uuid := case tg_op when 'DELETE' then old.owner else new.owner end;
begin
    if delta <> 0 then
        insert into upload_bytes (owner, stored) values (whose, delta)
        on conflict (owner) do update set stored = upload_bytes.stored + excluded.stored;
    end if;
    return null;
end $$;

create trigger upload_bytes_follow after insert or delete or update of size on uploads
    for each row execute function upload_bytes_follow();
