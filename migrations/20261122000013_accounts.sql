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

-- Owners were browser-session UUIDs until now: each becomes a guest (anything else, which the
-- server never wrote, a guest of its own too).
create function pg_temp.owner_id(owner text) returns uuid language sql immutable as $$
    select case
        when owner ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
            then owner::uuid
        else md5(owner)::uuid
    end
$$;

insert into users (id, role)
select distinct pg_temp.owner_id(owner), 'guest'
from (select owner from uploads union select owner from datasets union select owner from jobs) o;

-- The browsers of those owners still hold their old cookie (the owner id itself). The first
-- request that brings one gets a real session for that guest, once: the row is then deleted.
create table legacy_owners (id uuid primary key references users (id) on delete cascade);
insert into legacy_owners select id from users;

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
