//! Jobs of registered types (issue 14) and their follow-up chains: counting the items that
//! ended, sealing, and ending a job and the jobs around it.
//!
//! A type with a follow-up makes a chain: a job of it is created with a child job of the
//! follow-up type (and that one with its own, and so on), and each of its succeeded items adds
//! an item to the child (`store::assignments`). A job takes items until it is sealed; a child
//! is sealed once its parent is sealed and every item of the parent has ended; a job ends once
//! it is sealed, its items have all ended, and its child has ended: `completed` when every item
//! succeeded and the child completed, else `failed`. So the root ends last, and its callback
//! fires once, for the whole tree.
//!
//! Every change here takes the tree's job rows first, in id order ([`lock_tree`]): the end of
//! one job's item can seal the job's child or end its parent, and two such changes in one tree
//! must wait for each other rather than deadlock.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{JobKind, JobStatus, LIVE, item, job};
use crate::{auth::Sees, store::notify};

/// Locks the rows of the jobs of the trees of `ids` (the jobs of registered types linked to
/// them as parent or child, however far), all at once, in id order.
pub async fn lock_tree(conn: &mut PgConnection, ids: &[Uuid]) -> sqlx::Result<()> {
    sqlx::query!(
        "select 1 as locked from jobs where id in (
             with recursive up as (
                 select j.id, j.parent_id from jobs j where j.id = any($1)
                 union
                 select p.id, p.parent_id from jobs p join up on p.id = up.parent_id
                 where p.kind = $2
             ), tree as (
                 select id from up
                 union
                 select c.id from jobs c join tree on c.parent_id = tree.id where c.kind = $2
             )
             select id from tree)
         order by id for no key update",
        ids,
        JobKind::Items as JobKind,
    )
    .fetch_all(conn)
    .await?;
    Ok(())
}

/// Counts items of a `running` job that ended (`done` succeeded; `failed` ran out of attempts
/// or were failed for good), then settles its tree ([`settle`]). The caller holds the tree
/// ([`lock_tree`]). Every job changed, with its new version.
pub async fn add_items(
    conn: &mut PgConnection,
    id: Uuid,
    done: i32,
    failed: i32,
) -> sqlx::Result<Vec<(Uuid, i64)>> {
    let counted = sqlx::query_scalar!(
        "update jobs set chunks_done = chunks_done + $2, chunks_failed = chunks_failed + $3,
             item_progress = item_progress + $2 + $3, rows_ok = rows_ok + $2,
             rows_failed = rows_failed + $3, version = version + 1
         where id = $1 and status = $4 and kind = $5
         returning version",
        id,
        done,
        failed,
        JobStatus::Running as JobStatus,
        JobKind::Items as JobKind,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(version) = counted else {
        return Ok(Vec::new());
    };
    let mut changed = vec![(id, version)];
    changed.extend(settle(conn, id).await?);
    Ok(changed)
}

/// A live job of a registered type takes no more items (its owner sealed it), then its tree is
/// settled: one sealed without items starts and completes. Every job changed, with its new
/// version; none when `acts` does not cover it, it was sealed already, or it is a chain's
/// follow-up job (sealed by the chain).
pub async fn seal(conn: &mut PgConnection, id: Uuid, acts: Sees) -> sqlx::Result<Vec<(Uuid, i64)>> {
    // Its owner's, and not a chain's follow-up job (sealed by the chain): checked before the
    // tree is locked, so nobody holds another's tree.
    let may = sqlx::query_scalar!(
        r#"select true as "may!" from jobs j
           where id = $1 and kind = $3 and ($2::uuid is null or owner = $2)
             and not exists (select 1 from jobs p where p.id = j.parent_id and p.kind = $3)"#,
        id,
        acts.owner_filter(),
        JobKind::Items as JobKind,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if may.is_none() {
        return Ok(Vec::new());
    }
    lock_tree(conn, &[id]).await?;
    let sealed = sqlx::query_scalar!(
        "update jobs set sealed = true, item_count = chunks_total, version = version + 1
         where id = $1 and kind = $3 and status = any($4) and not sealed
           and ($2::uuid is null or owner = $2)
         returning version",
        id,
        acts.owner_filter(),
        JobKind::Items as JobKind,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(version) = sealed else {
        return Ok(Vec::new());
    };
    let mut changed = vec![(id, version)];
    changed.extend(settle(conn, id).await?);
    Ok(changed)
}

/// After `id` changed: seals its child once its own items have all ended, ends it once its
/// child has ended, and goes on to its parent when it ended. Every job changed, with its new
/// version (a job may appear more than once: its last version counts).
pub async fn settle(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Vec<(Uuid, i64)>> {
    let mut changed = Vec::new();
    let mut work = vec![id];
    while let Some(id) = work.pop() {
        let sealed = seal_children(conn, id).await?;
        if !sealed.is_empty() {
            // Its children first (an empty one ends at once), then this job again.
            work.push(id);
            for (child, version) in sealed {
                changed.push((child, version));
                work.push(child);
            }
            continue;
        }
        if let Some(version) = end(conn, id).await? {
            changed.push((id, version));
            if let Some(parent) = parent_of(conn, id).await? {
                work.push(parent);
            }
        }
    }
    Ok(changed)
}

/// Seals the live, unsealed children of a sealed `id` whose items have all ended.
async fn seal_children(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Vec<(Uuid, i64)>> {
    let sealed = sqlx::query!(
        "update jobs c set sealed = true, item_count = c.chunks_total, version = c.version + 1
         from jobs p
         where p.id = $1 and p.sealed and p.chunks_done + p.chunks_failed = p.chunks_total
           and c.parent_id = p.id and c.kind = $2 and not c.sealed and c.status = any($3)
         returning c.id, c.version",
        id,
        JobKind::Items as JobKind,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_all(conn)
    .await?;
    Ok(sealed
        .into_iter()
        .map(|job| (job.id, job.version))
        .collect())
}

/// Ends `id` if it is sealed, its items have all ended and it has no live child; one still
/// waiting (it never had an item to claim) starts first.
async fn end(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query!(
        "update jobs j set status = $3, started_at = now(), version = version + 1
         where id = $1 and kind = $2 and status = $4 and sealed
           and chunks_done + chunks_failed = chunks_total
           and not exists (select 1 from jobs c where c.parent_id = j.id and c.kind = $2
                               and c.status = any($5))",
        id,
        JobKind::Items as JobKind,
        JobStatus::Running as JobStatus,
        JobStatus::Waiting as JobStatus,
        &LIVE[..] as &[JobStatus],
    )
    .execute(&mut *conn)
    .await?;
    job::end_if_all_chunks_ended(conn, id).await
}

/// The parent of `id`, when it is a job of a registered type (not a batch).
async fn parent_of(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "select p.id from jobs j join jobs p on p.id = j.parent_id where j.id = $1 and p.kind = $2",
        id,
        JobKind::Items as JobKind,
    )
    .fetch_optional(conn)
    .await
}

/// `failed`/`cancelled` → `waiting`, for each of `ids` that `acts` covers that is a job of a
/// registered type, with the follow-up chain below it (ended, as its parent ended: each goes
/// back to `waiting`, unsealed, to take the new results of its parent). Their failed items,
/// and items a worker held, are free again with fresh attempts (their failures stay listed);
/// done items stay done. Every job retried, with its new version. A chain is retried from its
/// root (its follow-up jobs are not retried alone), and not once retention removed its items.
pub async fn retry(
    conn: &mut PgConnection,
    ids: &[Uuid],
    acts: Sees,
) -> sqlx::Result<Vec<(Uuid, i64)>> {
    // The roots to retry (a chain's follow-up job goes with its root, never alone), and every
    // job below them, all ended with them; none of a tree whose items retention removed.
    let tree = sqlx::query!(
        r#"with recursive below as (
               select id, id as root, items_pruned_at is not null as pruned from jobs
               where id = any($1) and kind = $2 and status = any($3)
                 and ($4::uuid is null or owner = $4)
                 and not exists (select 1 from jobs p where p.id = jobs.parent_id and p.kind = $2)
               union
               select c.id, b.root, c.items_pruned_at is not null from jobs c
               join below b on c.parent_id = b.id
               where c.kind = $2 and c.status <> all($5)
           )
           select id as "id!", id = root as "root!" from below
           where root not in (select root from below where pruned)"#,
        ids,
        JobKind::Items as JobKind,
        &[JobStatus::Failed, JobStatus::Cancelled] as &[JobStatus],
        acts.owner_filter(),
        &LIVE[..] as &[JobStatus],
    )
    .fetch_all(&mut *conn)
    .await?;
    let jobs: Vec<Uuid> = tree.iter().map(|job| job.id).collect();
    let roots: Vec<Uuid> = tree
        .iter()
        .filter(|job| job.root)
        .map(|job| job.id)
        .collect();
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // Items, then their jobs (as claims and results take them).
    let types = item::reopen(conn, &jobs).await?;
    sqlx::query!(
        "select 1 as locked from jobs where id = any($1) order by id for no key update",
        &jobs,
    )
    .fetch_all(&mut *conn)
    .await?;
    let retried = sqlx::query!(
        "update jobs set status = $2, error = null, finished_at = null,
             chunks_failed = 0, rows_failed = 0, item_progress = chunks_done,
             sealed = sealed and id = any($3), version = version + 1
         where id = any($1) and status <> all($4) and items_pruned_at is null
         returning id, version",
        &jobs,
        JobStatus::Waiting as JobStatus,
        &roots,
        &LIVE[..] as &[JobStatus],
    )
    .fetch_all(&mut *conn)
    .await?;
    for job_type in types {
        notify::items_ready(conn, &job_type).await?;
    }
    let mut changed: Vec<(Uuid, i64)> = retried.iter().map(|job| (job.id, job.version)).collect();
    // A job whose items had all ended waits only for its chain again: seal what follows it.
    for job in &retried {
        changed.extend(settle(conn, job.id).await?);
    }
    // Each job once, at its last version.
    changed.sort();
    changed.reverse();
    changed.dedup_by_key(|(id, _)| *id);
    Ok(changed)
}
