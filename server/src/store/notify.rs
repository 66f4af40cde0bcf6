//! The `job_progress` channel: every change to a job sends `{"id","version"}` in the same
//! transaction as the change, so listeners hear of it exactly when it becomes visible.
//! Payloads carry ids only (NOTIFY's 8 kB limit); readers fetch the row.
//!
//! The `account_changed` channel: a person's sessions, tokens or role changed (signed out, new
//! password, reset, revoked token, new role); the payload is their id. Open event streams of
//! that person check that what they were opened with still holds.
//!
//! The `items_ready` channel: items of a job type (the payload) may be claimed now (added,
//! freed by a failure or by lease rescue, reopened by a retry); claims waiting for that type
//! try again.

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

pub const CHANNEL: &str = "job_progress";
pub const ACCOUNTS: &str = "account_changed";
pub const ITEMS: &str = "items_ready";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobChanged {
    pub id: Uuid,
    pub version: i64,
}

/// Announces the job's new version, in the transaction that makes it; this process stops
/// answering from memory for the job until the announcement comes back (`progress::recent`).
pub async fn job_changed(conn: &mut PgConnection, id: Uuid, version: i64) -> sqlx::Result<()> {
    let payload = announcing(id, version);
    sqlx::query!("select 1 as sent from pg_notify($1, $2)", CHANNEL, payload)
        .fetch_one(conn)
        .await?;
    Ok(())
}

/// [`job_changed`] for several jobs, in one statement.
pub async fn jobs_changed(conn: &mut PgConnection, changed: &[(Uuid, i64)]) -> sqlx::Result<()> {
    let payloads: Vec<String> = changed
        .iter()
        .map(|&(id, version)| announcing(id, version))
        .collect();
    sqlx::query!(
        r#"select count(pg_notify($1, payload)) as "sent!" from unnest($2::text[]) payload"#,
        CHANNEL,
        &payloads,
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// The payload that announces the job's new version on [`CHANNEL`], for a statement that
/// sends it itself (`pg_notify`) as it makes the change (a new job's insert: a round trip
/// fewer under its owner's lock); as [`job_changed`], this process stops answering from
/// memory for the job until it comes back.
pub fn announcing(id: Uuid, version: i64) -> String {
    crate::progress::recent::changing(id, version);
    serde_json::to_string(&JobChanged { id, version })
        .expect("a uuid and an integer always serialize")
}

/// Announces that these jobs are gone (deleted, or pruned by retention): the version no later
/// change can pass, so that whatever remembers them forgets them for good.
pub async fn jobs_gone(conn: &mut PgConnection, ids: &[Uuid]) -> sqlx::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    for &id in ids {
        crate::progress::recent::changing(id, GONE);
    }
    sqlx::query!(
        r#"select count(pg_notify($1, json_build_object('id', id, 'version', $3::int8)::text))
               as "sent!"
           from unnest($2::uuid[]) id"#,
        CHANNEL,
        ids,
        GONE,
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// The version [`jobs_gone`] announces.
pub const GONE: i64 = i64::MAX;

/// Tells every process that `user_id`'s sessions, tokens or role changed (this one forgets
/// what it remembers of them at once: `auth::identities`).
pub async fn account_changed(conn: &mut PgConnection, user_id: Uuid) -> sqlx::Result<()> {
    crate::auth::identities::changing(user_id);
    sqlx::query!(
        "select 1 as sent from pg_notify($1, $2)",
        ACCOUNTS,
        user_id.to_string()
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// Tells waiting claims that items of `job_type` may be claimed now.
pub async fn items_ready(conn: &mut PgConnection, job_type: &str) -> sqlx::Result<()> {
    sqlx::query!("select 1 as sent from pg_notify($1, $2)", ITEMS, job_type)
        .fetch_one(conn)
        .await?;
    Ok(())
}
