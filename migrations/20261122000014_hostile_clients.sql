-- An upload is stored part by part as it arrives, each part in its own short transaction (a
-- slow client never holds a transaction or a pooled connection while we wait for its bytes).
-- Until its last part is in, it is `receiving`: invisible to jobs, counted against its owner's
-- limits while `alive_at` (bumped with every part) is recent, and removed by retention if its
-- sender never finished.
alter table uploads
    add column receiving boolean not null default false,
    add column alive_at timestamptz not null default now();

create index uploads_receiving on uploads (owner) where receiving;
-- The owner's stored bytes and active jobs are counted at every upload and job creation.
create index jobs_active_by_owner on jobs (owner) where status in ('waiting', 'running');
