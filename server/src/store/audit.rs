//! The audit log of bulk actions: who did what to how many jobs, and when. An entry is written
//! as the action begins, its count of changed jobs bumped in each batch's own transaction (so it
//! is exact even if the process dies mid-way), and marked finished at the end.

use app::bulk::{AuditEntry, BulkAction};
use sqlx::{PgConnection, PgPool, types::Json};
use uuid::Uuid;

/// A new entry for an action beginning; its id.
pub async fn begin(
    pool: &PgPool,
    actor: Uuid,
    action: BulkAction,
    selection: &serde_json::Value,
    matched: i64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "insert into audit_log (actor, actor_email, action, selection, matched)
         values ($1, (select email from users where id = $1), $2, $3, $4)
         returning id",
        actor,
        action as BulkAction,
        Json(selection) as _,
        matched,
    )
    .fetch_one(pool)
    .await
}

/// Adds `changed` jobs to the entry, in the caller's transaction (the batch that changed them).
pub async fn add_changed(conn: &mut PgConnection, id: i64, changed: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "update audit_log set changed = changed + $2 where id = $1",
        id,
        changed
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks the entry finished; with `error`, why it stopped before it was through.
pub async fn finish(pool: &PgPool, id: i64, error: Option<&str>) -> sqlx::Result<()> {
    sqlx::query!(
        "update audit_log set finished_at = now(), error = $2 where id = $1",
        id,
        error
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Entries newest first, before the entry `before` when given.
pub async fn list(pool: &PgPool, before: Option<i64>, limit: i64) -> sqlx::Result<Vec<AuditEntry>> {
    sqlx::query_as!(
        AuditEntry,
        r#"select a.id, a.at, a.actor, a.actor_email,
                  a.action as "action: BulkAction", a.selection, a.matched, a.changed,
                  a.finished_at, a.error
           from audit_log a
           where $1::int8 is null or a.id < $1
           order by a.id desc
           limit $2"#,
        before,
        limit,
    )
    .fetch_all(pool)
    .await
}
