//! Jobs per owner, kind and status, as the list shows them above its rows: kept by triggers on
//! `jobs` as appended deltas, folded into totals by maintenance (migration 16 says why). A count
//! is read in one statement over the folded rows and the deltas not folded yet, so it is exact
//! whenever it is read, at any number of jobs, without counting them.

use app::{
    job_list::StatusCount,
    model::{JobKind, JobStatus},
};
use sqlx::PgConnection;
use uuid::Uuid;

/// Jobs of `owner` (every owner: `None`) of any of `kinds` (every kind when empty), per status;
/// every status is listed, in [`JobStatus::ALL`] order.
pub async fn exact(
    conn: &mut PgConnection,
    owner: Option<Uuid>,
    kinds: &[JobKind],
) -> sqlx::Result<Vec<StatusCount>> {
    let kinds = if kinds.is_empty() {
        &JobKind::ALL[..]
    } else {
        kinds
    };
    let counted = match owner {
        Some(owner) => sqlx::query!(
            r#"select status as "status!: JobStatus", sum(n)::int8 as "n!"
                   from (select status, n from job_counts where owner = $1 and kind = any($2)
                         union all
                         select status, n from job_count_deltas
                         where owner = $1 and kind = any($2)) c
                   group by status"#,
            owner,
            kinds as &[JobKind],
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|row| (row.status, row.n))
        .collect::<Vec<_>>(),
        None => sqlx::query!(
            r#"select status as "status!: JobStatus", sum(n)::int8 as "n!"
               from (select status, n from job_count_totals where kind = any($1)
                     union all
                     select status, n from job_count_deltas where kind = any($1)) c
               group by status"#,
            kinds as &[JobKind],
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|row| (row.status, row.n))
        .collect(),
    };
    Ok(JobStatus::ALL
        .into_iter()
        .map(|status| StatusCount {
            status,
            count: counted
                .iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| *n),
            or_more: false,
        })
        .collect())
}

/// Every job, per kind and status (those with none are left out).
pub async fn by_kind_and_status(
    conn: &mut PgConnection,
) -> sqlx::Result<Vec<(JobKind, JobStatus, i64)>> {
    Ok(sqlx::query!(
        r#"select kind as "kind!: JobKind", status as "status!: JobStatus", sum(n)::int8 as "n!"
           from (select kind, status, n from job_count_totals
                 union all
                 select kind, status, n from job_count_deltas) c
           group by kind, status"#
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|row| (row.kind, row.status, row.n))
    .collect())
}

/// Folds the deltas appended so far into the per-owner counts and the totals; returns how many
/// deltas it folded. Deltas of transactions still open stay for the next round.
pub async fn fold(conn: &mut PgConnection) -> sqlx::Result<u64> {
    sqlx::query_scalar!(
        r#"with moved as (delete from job_count_deltas returning owner, kind, status, n),
                by_owner as (select owner, kind, status, sum(n)::int8 as n from moved
                             group by owner, kind, status),
                owners as (insert into job_counts (owner, kind, status, n)
                           select owner, kind, status, n from by_owner
                           on conflict (owner, kind, status)
                           do update set n = job_counts.n + excluded.n),
                totals as (insert into job_count_totals (kind, status, n)
                           select kind, status, sum(n)::int8 from by_owner group by kind, status
                           on conflict (kind, status)
                           do update set n = job_count_totals.n + excluded.n)
           select count(*) as "folded!" from moved"#
    )
    .fetch_one(conn)
    .await
    .map(|n| n as u64)
}
