//! Worker tokens (issue 14): what an external worker proves itself with. Each is bound to job
//! types and opens only the worker routes, for items of those types; admins create and revoke
//! them. As with API tokens, only the secret's SHA-256 is kept (`auth::secret`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::sessions::TOUCH_EVERY_SECS;

/// A worker token as admins see it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerTokenView {
    pub id: Uuid,
    pub name: String,
    /// The job types whose items it may claim.
    pub types: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// The worker a request's token belongs to: what it may claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub token_id: Uuid,
    pub types: Vec<String>,
}

/// Why a token was not created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCreated {
    /// It names a type nobody registered.
    NoSuchType(String),
}

/// Records a new worker token for `types` (each registered: types are never removed).
pub async fn insert(
    pool: &PgPool,
    name: &str,
    types: &[String],
    token_hash: &[u8],
    by: Uuid,
) -> sqlx::Result<Result<WorkerTokenView, NotCreated>> {
    let known: Vec<String> =
        sqlx::query_scalar!("select name from job_types where name = any($1)", types)
            .fetch_all(pool)
            .await?;
    if let Some(unknown) = types.iter().find(|name| !known.contains(name)) {
        return Ok(Err(NotCreated::NoSuchType(unknown.clone())));
    }
    sqlx::query_as!(
        WorkerTokenView,
        "insert into worker_tokens (name, types, token_hash, created_by) values ($1, $2, $3, $4)
         returning id, name, types, created_at, last_used_at",
        name,
        types,
        token_hash,
        by,
    )
    .fetch_one(pool)
    .await
    .map(Ok)
}

/// Every worker token, oldest first.
pub async fn list(pool: &PgPool) -> sqlx::Result<Vec<WorkerTokenView>> {
    sqlx::query_as!(
        WorkerTokenView,
        "select id, name, types, created_at, last_used_at from worker_tokens
         order by created_at, id"
    )
    .fetch_all(pool)
    .await
}

/// Revokes a worker token; `false` when none has that id. Its worker's next request is refused
/// (its assignments run out with their leases).
pub async fn delete(pool: &PgPool, id: Uuid) -> sqlx::Result<bool> {
    let deleted = sqlx::query!("delete from worker_tokens where id = $1", id)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(deleted == 1)
}

/// The worker whose token has this hash; renews its last use.
pub async fn resolve(pool: &PgPool, token_hash: &[u8]) -> sqlx::Result<Option<Worker>> {
    let found = sqlx::query!(
        r#"select id, types,
                  coalesce(last_used_at < now() - make_interval(secs => $2), true) as "stale!"
           from worker_tokens where token_hash = $1"#,
        token_hash,
        TOUCH_EVERY_SECS,
    )
    .fetch_optional(pool)
    .await?;
    let Some(found) = found else {
        return Ok(None);
    };
    if found.stale {
        sqlx::query!(
            "update worker_tokens set last_used_at = now() where id = $1",
            found.id
        )
        .execute(pool)
        .await?;
    }
    Ok(Some(Worker {
        token_id: found.id,
        types: found.types,
    }))
}
