-- Accounts, sessions and API tokens (docs/architecture.md, "Identity"). Everything a person
-- creates is owned by a `users` row: an account (email and password) or a guest (neither),
-- which a visitor who is not signed in gets from the server. A guest who signs up becomes a
-- member in place, so what they made stays theirs.
create table users (
    id uuid primary key,
    -- Lower-cased and trimmed; null for a guest.
    email text unique,
    -- An Argon2id PHC string; null for a guest.
    password_hash text,
    role text not null check (role in ('admin', 'viewer', 'member', 'guest')),
    created_at timestamptz not null default now(),
    check ((role = 'guest') = (email is null)),
    check ((role = 'guest') = (password_hash is null))
);

-- A browser's session: the cookie holds a random 256-bit token, this table only its SHA-256.
create table sessions (
    token_hash bytea primary key,
    user_id uuid not null references users (id) on delete cascade,
    created_at timestamptz not null default now(),
    -- Renewed at most once a minute by requests, with the idle deadline.
    last_seen_at timestamptz not null default now(),
    -- It ends at the first of these: the absolute lifetime, or the idle timeout.
    expires_at timestamptz not null,
    idle_expires_at timestamptz not null
);
create index sessions_by_user on sessions (user_id);
create index sessions_by_expiry on sessions (least(expires_at, idle_expires_at));

-- Personal API tokens for scripts (`Authorization: Bearer …`), shown once, stored hashed.
create table api_tokens (
    id uuid primary key,
    user_id uuid not null references users (id) on delete cascade,
    name text not null,
    token_hash bytea not null unique,
    created_at timestamptz not null default now(),
    last_used_at timestamptz
);
create index api_tokens_by_user on api_tokens (user_id, created_at);

-- Owners were browser-session ids until now (the cookie's value): each becomes a guest with a
-- new, random id, since user ids are shown to others (admins, viewers, `?owner=` links) and
-- the old value must stay a secret.
create temporary table owner_map on commit drop as
    select owner, gen_random_uuid() as id
    from (select owner from uploads union select owner from datasets
          union select owner from jobs) o;

create function pg_temp.owner_id(old text) returns uuid language plpgsql stable as $$
begin
    return (select id from owner_map where owner = old);
end
$$;

insert into users (id, role) select id, 'guest' from owner_map;

-- Their browsers still hold the old cookie: a request that brings one gets a session for its
-- guest (see `auth::accounts::claim_legacy`). Claims are keyed by the old value's SHA-256,
-- work for a few minutes after the first (racing tabs all get in), and for a year at most
-- (the old cookie's own lifetime).
create table legacy_owners (
    cookie_hash bytea primary key,
    user_id uuid not null references users (id) on delete cascade,
    created_at timestamptz not null default now(),
    claimed_at timestamptz
);
insert into legacy_owners (cookie_hash, user_id)
select sha256(convert_to(owner, 'UTF8')), id from owner_map;

alter table uploads alter column owner type uuid using pg_temp.owner_id(owner);
alter table datasets alter column owner type uuid using pg_temp.owner_id(owner);
alter table jobs alter column owner type uuid using pg_temp.owner_id(owner);
alter table uploads add foreign key (owner) references users (id);
alter table datasets add foreign key (owner) references users (id);
alter table jobs add foreign key (owner) references users (id);

-- Dataset names are per owner: two people may both have `contacts`.
alter table datasets drop constraint datasets_name_key;
alter table datasets add constraint datasets_owner_name unique (owner, name);

-- A member's job list, newest first; and the owner checks of guest retention.
create index jobs_by_owner on jobs (owner, created_at desc, id desc);
create index uploads_by_owner on uploads (owner);

-- Serialize keys are per owner: stored as `<owner>:<key>` (the default key is
-- `dataset:<name>`), so nobody can queue a job ahead of, or behind, someone else's.
update jobs set serialize_key = owner::text || ':' || serialize_key
where serialize_key is not null;
