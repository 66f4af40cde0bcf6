//! Job types: their registration and reads.

use sqlx::PgPool;
use uuid::Uuid;

use app::job_types::JobTypeView;

/// `sqlx::query_as!(JobTypeView, …)` of `job_types`, with `$rest` after it.
macro_rules! select_view {
    ($rest:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            JobTypeView,
            "select name, lease_seconds, max_failures_per_item, backoff_seconds, ordered,
                    retain_days, follow_up, max_payload_bytes, created_at
             from job_types "
                + $rest,
            $($arg),*
        )
    };
}

/// A type to register, checked (`http::job_types`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJobType {
    pub name: String,
    pub lease_seconds: i32,
    pub max_failures_per_item: i32,
    pub backoff_seconds: i32,
    pub ordered: bool,
    pub retain_days: Option<i32>,
    pub follow_up: Option<String>,
    pub max_payload_bytes: i32,
}

/// Why a type was not registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRegistered {
    /// A type of that name exists (types do not change: jobs of them run on their defaults).
    Exists,
    /// Its follow-up names no registered type.
    NoSuchFollowUp(String),
}

/// Registers a type; the type as stored.
pub async fn register(
    pool: &PgPool,
    new: &NewJobType,
    by: Uuid,
) -> sqlx::Result<Result<JobTypeView, NotRegistered>> {
    let mut tx = pool.begin().await?;
    if let Some(follow_up) = &new.follow_up {
        // Held until the insert commits: a type is never removed under a follow-up to it.
        let known = sqlx::query_scalar!(
            "select 1 as known from job_types where name = $1 for key share",
            follow_up
        )
        .fetch_optional(&mut *tx)
        .await?;
        if known.is_none() {
            return Ok(Err(NotRegistered::NoSuchFollowUp(follow_up.clone())));
        }
    }
    let inserted = sqlx::query_scalar!(
        "insert into job_types (name, lease_seconds, max_failures_per_item, backoff_seconds,
                                ordered, retain_days, follow_up, max_payload_bytes, created_by)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         on conflict (name) do nothing
         returning name",
        new.name,
        new.lease_seconds,
        new.max_failures_per_item,
        new.backoff_seconds,
        new.ordered,
        new.retain_days,
        new.follow_up,
        new.max_payload_bytes,
        by,
    )
    .fetch_optional(&mut *tx)
    .await?;
    if inserted.is_none() {
        return Ok(Err(NotRegistered::Exists));
    }
    let registered = select_view!("where name = $1", new.name)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Ok(registered))
}

/// Whether `name` could be a type's (the table's check: lower case, digits, `.`, `_`, `-`,
/// starting with a letter, at most 63 characters). Checked before a lookup: a name with a NUL
/// is not sent to PostgreSQL.
pub fn is_well_formed(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

/// Every registered type, by name.
pub async fn list(pool: &PgPool) -> sqlx::Result<Vec<JobTypeView>> {
    select_view!("order by name").fetch_all(pool).await
}

/// The type of this name.
pub async fn find(pool: &PgPool, name: &str) -> sqlx::Result<Option<JobTypeView>> {
    if !is_well_formed(name) {
        return Ok(None);
    }
    select_view!("where name = $1", name)
        .fetch_optional(pool)
        .await
}
