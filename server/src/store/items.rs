//! The items of jobs of registered types (issue 14): adding them in batches, and reading them.
//! Items count in their job as chunks do (`chunks_total`: known; `chunks_done`/`chunks_failed`:
//! ended), so the job states of `store::states` carry them unchanged.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use app::job_types::{ItemState, ItemView};

use super::{
    notify,
    states::{JobKind, JobStatus, LIVE},
};

/// An item to add: its payload (JSON text) and dedupe key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewItem {
    pub payload: String,
    pub dedupe_key: Option<String>,
}

/// What adding a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    pub added: i64,
    /// Items whose dedupe key the job had (or that repeated one earlier in the batch).
    pub duplicates: i64,
    /// The job's new version, when any item was added.
    pub version: Option<i64>,
}

/// Who adds a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddedBy {
    /// A person, to a job `owner` has (`None`: anyone's, for admins) that is not a chain's
    /// follow-up job, within its owner's `max_bytes` of item payloads kept.
    Person { owner: Option<Uuid>, max_bytes: i64 },
    /// A chain: the follow-up items of its parent's results.
    Chain,
}

/// Why a batch was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAdded {
    /// No job of a registered type with that id that the caller may change.
    NoSuchJob,
    /// It is sealed, or it has ended.
    Closed,
    /// It is a chain's follow-up job: its parent's results fill it.
    FollowUp,
    /// Its owner's jobs keep this many bytes of items already, the most.
    OverQuota { limit: i64 },
}

/// Adds a batch of items to a live, unsealed job of a registered type, in the caller's
/// transaction, numbered after the job's last; an item whose dedupe key the job has is left
/// out. A person's batch is counted against their owner's limit under the owner's lock; over
/// it, the caller must roll the transaction back (the items are in it).
pub async fn add(
    conn: &mut PgConnection,
    job_id: Uuid,
    by: AddedBy,
    items: &[NewItem],
) -> sqlx::Result<Result<Added, NotAdded>> {
    let owner = match by {
        AddedBy::Person { owner, .. } => owner,
        AddedBy::Chain => None,
    };
    if let AddedBy::Person { .. } = by {
        // The owner's items counted one batch at a time (the lock creates and retries take
        // first, so it is taken before the job's row here too).
        let job_owner = sqlx::query_scalar!("select owner from jobs where id = $1", job_id)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(job_owner) = job_owner {
            super::jobs::hold_owners_jobs(conn, job_owner).await?;
        }
    }
    // The job's row, locked: batches added at once are numbered one after the other.
    let job = sqlx::query!(
        r#"select sealed, status = any($3) as "live!", job_type as "job_type!", owner,
               exists (select 1 from jobs p where p.id = j.parent_id and p.kind = $2)
                   as "follow_up!"
           from jobs j
           where id = $1 and kind = $2 and ($4::uuid is null or owner = $4)
           for no key update of j"#,
        job_id,
        JobKind::Items as JobKind,
        &LIVE[..] as &[JobStatus],
        owner,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(job) = job else {
        return Ok(Err(NotAdded::NoSuchJob));
    };
    if job.follow_up && matches!(by, AddedBy::Person { .. }) {
        return Ok(Err(NotAdded::FollowUp));
    }
    if job.sealed || !job.live {
        return Ok(Err(NotAdded::Closed));
    }
    let job_type = job.job_type;
    let payloads: Vec<&str> = items.iter().map(|i| i.payload.as_str()).collect();
    let keys: Vec<Option<&str>> = items.iter().map(|i| i.dedupe_key.as_deref()).collect();
    let inserted = sqlx::query!(
        r#"with last as (
             select coalesce(max(item_no), 0) as n from job_items where job_id = $1
         ), inserted as (
             insert into job_items (job_id, item_no, payload, dedupe_key)
             select $1, last.n + u.ord, u.payload::jsonb, u.key
             from unnest($2::text[], $3::text[]) with ordinality as u (payload, key, ord), last
             order by u.ord
             on conflict (job_id, dedupe_key) where dedupe_key is not null do nothing
             returning octet_length(payload::text) as bytes
         )
         select count(*) as "n!", coalesce(sum(bytes), 0)::int8 as "bytes!" from inserted"#,
        job_id,
        &payloads as &[&str],
        &keys as &[Option<&str>],
    )
    .fetch_one(&mut *conn)
    .await?;
    let added = inserted.n;
    if let AddedBy::Person { max_bytes, .. } = by {
        // Counted as stored (jsonb's text), this batch included; the caller rolls it back.
        let kept = sqlx::query_scalar!(
            r#"select coalesce(sum(item_bytes), 0)::int8 as "bytes!" from jobs
               where owner = $1 and item_bytes > 0 and items_pruned_at is null"#,
            job.owner,
        )
        .fetch_one(&mut *conn)
        .await?;
        if kept + inserted.bytes > max_bytes {
            return Ok(Err(NotAdded::OverQuota { limit: max_bytes }));
        }
    }
    let version = if added > 0 {
        notify::items_ready(conn, &job_type).await?;
        sqlx::query_scalar!(
            "update jobs set chunks_total = chunks_total + $2, item_count = chunks_total + $2,
                 item_bytes = item_bytes + $3, version = version + 1
             where id = $1
             returning version",
            job_id,
            added as i32,
            inserted.bytes,
        )
        .fetch_one(&mut *conn)
        .await
        .map(Some)?
    } else {
        None
    };
    Ok(Ok(Added {
        added,
        duplicates: items.len() as i64 - added,
        version,
    }))
}

/// Refreshes the planner's statistics of the items' table when it holds about twice the rows
/// they counted or more (`added`: rows just committed, which the activity counters may not
/// show yet, or may show already), and says whether it asked for it. This is PostgreSQL's
/// advice after a bulk load ("run ANALYZE afterwards"): autovacuum would, but only on its next
/// round (a minute, by default), and until then plans made for a small table stay cached. On
/// a doubling only, so refreshes are logarithmic in the table's size; one already under way
/// elsewhere is skipped (`skip_locked`). Its sample is bounded (30,000 rows by default), so
/// it holds the table's `share update exclusive` lock (which only schema changes and vacuum
/// wait for) a second or so at most.
pub async fn analyze_if_grown(pool: &PgPool, added: i64) -> sqlx::Result<bool> {
    let grown = sqlx::query_scalar!(
        r#"select s.n_live_tup + $1 > 2 * greatest(c.reltuples, 1000)::int8 as "grown!"
           from pg_stat_user_tables s join pg_class c on c.oid = s.relid
           where s.relid = 'job_items'::regclass"#,
        added,
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or(false);
    if grown {
        sqlx::query!("analyze (skip_locked) job_items")
            .execute(pool)
            .await?;
    }
    Ok(grown)
}

/// A page of a job's items in order, those in `state` only if given, after item `after`; with
/// the item number to pass as `after` for the next page (none on the last).
pub async fn page(
    pool: &PgPool,
    job_id: Uuid,
    state: Option<ItemState>,
    after: i64,
    limit: i64,
) -> sqlx::Result<(Vec<ItemView>, Option<i64>)> {
    let items = sqlx::query_as!(
        ItemRow,
        r#"select item_no, state as "state: ItemState", payload, dedupe_key, attempts, result,
                  failures, done_at
           from job_items
           where job_id = $1 and item_no > $2 and ($3::chunk_state is null or state = $3)
           order by item_no limit $4"#,
        job_id,
        after,
        state as Option<ItemState>,
        limit,
    )
    .fetch_all(pool)
    .await?;
    let next = (items.len() as i64 == limit)
        .then(|| items.last().map(|item| item.item_no))
        .flatten();
    Ok((items.into_iter().map(ItemView::from).collect(), next))
}

struct ItemRow {
    item_no: i64,
    state: ItemState,
    payload: serde_json::Value,
    dedupe_key: Option<String>,
    attempts: i32,
    result: Option<serde_json::Value>,
    failures: serde_json::Value,
    done_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<ItemRow> for ItemView {
    fn from(row: ItemRow) -> Self {
        ItemView {
            item_no: row.item_no,
            state: row.state,
            payload: row.payload,
            dedupe_key: row.dedupe_key,
            attempts: row.attempts,
            result: row.result,
            failures: row.failures,
            done_at: row.done_at,
        }
    }
}

/// Why PostgreSQL's `jsonb` would refuse this JSON text (which `serde_json` accepted as it
/// read it, without decoding its strings), if it would: a NUL character, or half of a UTF-16
/// surrogate pair. Strings with `\u` escapes of either kind are decoded to tell; others are not
/// read again.
pub fn unstorable(json: &str) -> Option<&'static str> {
    if json.contains("\\u0000") {
        return Some("a NUL character (\\u0000)");
    }
    let lower = json.to_ascii_lowercase();
    if lower.contains("\\ud") && serde_json::from_str::<serde_json::Value>(json).is_err() {
        return Some("half of a UTF-16 surrogate pair (a lone \\uD800-\\uDFFF)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::unstorable;

    #[test]
    fn nul_and_lone_surrogates_are_refused_and_pairs_kept() {
        assert!(unstorable(r#"{"a":"\u0000"}"#).is_some());
        assert!(unstorable(r#""\udcff""#).is_some());
        assert!(unstorable(r#""\uD83D""#).is_some());
        assert_eq!(unstorable(r#""\ud83d\ude00 ok""#), None);
        assert_eq!(unstorable(r#"{"n": 1}"#), None);
    }
}
