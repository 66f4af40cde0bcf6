//! Browser sessions and personal API tokens: both are random secrets the client holds and we
//! keep only the SHA-256 of (`auth::secret`), each resolving to the person it belongs to.

use std::time::Duration;

use app::auth::{Me, TokenView};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// How long sessions last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// From sign-in (or a guest's first visit) to its end, however active.
    pub absolute: Duration,
    /// Without a request for this long, it ends.
    pub idle: Duration,
}

/// A request's last sighting is written at most this often.
pub(super) const TOUCH_EVERY_SECS: f64 = 60.0;

/// Starts a session for `user_id` whose token hashes to `token_hash`.
pub async fn insert(
    conn: &mut PgConnection,
    token_hash: &[u8],
    user_id: Uuid,
    lifetime: Lifetime,
) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into sessions (token_hash, user_id, expires_at, idle_expires_at)
         values ($1, $2, now() + make_interval(secs => $3), now() + make_interval(secs => $4))",
        token_hash,
        user_id,
        lifetime.absolute.as_secs_f64(),
        lifetime.idle.as_secs_f64(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

struct Holder {
    id: Uuid,
    email: Option<String>,
    role: String,
    stale: bool,
    /// Seconds it holds at least, unless revoked (which notifies).
    valid_secs: f64,
}

/// Whom a credential proves, and for how long that may be taken as true without asking again
/// unless a notification says otherwise: until the session could end, and at most until its
/// last sighting is due to be written again.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub me: Me,
    pub lasting: Duration,
}

impl Holder {
    fn resolved(&self) -> Resolved {
        let secs = self.valid_secs.clamp(0.0, TOUCH_EVERY_SECS);
        Resolved {
            me: self.me(),
            lasting: Duration::from_secs_f64(secs),
        }
    }

    fn me(&self) -> Me {
        Me {
            id: self.id,
            email: self.email.clone(),
            role: super::users::role(&self.role),
        }
    }
}

/// The person whose live session has this token hash; renews its last sighting.
pub async fn resolve(
    pool: &PgPool,
    token_hash: &[u8],
    lifetime: Lifetime,
) -> sqlx::Result<Option<Resolved>> {
    let holder = sqlx::query_as!(
        Holder,
        r#"select u.id, u.email, u.role,
                  s.last_seen_at < now() - make_interval(secs => $2) as "stale!",
                  extract(epoch from least(s.expires_at, s.idle_expires_at,
                                           s.last_seen_at + make_interval(secs => $3))
                                     - now())::float8 as "valid_secs!"
           from sessions s join users u on u.id = s.user_id
           where s.token_hash = $1 and s.expires_at > now() and s.idle_expires_at > now()
             -- The idle timeout as configured now, should it have been shortened.
             and s.last_seen_at > now() - make_interval(secs => $3)"#,
        token_hash,
        TOUCH_EVERY_SECS,
        lifetime.idle.as_secs_f64(),
    )
    .fetch_optional(pool)
    .await?;
    let Some(holder) = holder else {
        return Ok(None);
    };
    if holder.stale {
        sqlx::query!(
            "update sessions set last_seen_at = now(),
                 idle_expires_at = now() + make_interval(secs => $2)
             where token_hash = $1",
            token_hash,
            lifetime.idle.as_secs_f64(),
        )
        .execute(pool)
        .await?;
    }
    Ok(Some(holder.resolved()))
}

/// Ends one session.
pub async fn delete(conn: &mut PgConnection, token_hash: &[u8]) -> sqlx::Result<()> {
    sqlx::query!("delete from sessions where token_hash = $1", token_hash,)
        .execute(conn)
        .await?;
    Ok(())
}

/// Ends every session of a person (their password changed).
pub async fn delete_all_of(conn: &mut PgConnection, user_id: Uuid) -> sqlx::Result<u64> {
    Ok(
        sqlx::query!("delete from sessions where user_id = $1", user_id,)
            .execute(conn)
            .await?
            .rows_affected(),
    )
}

/// Revokes every API token of a person (their account was reset).
pub async fn delete_tokens_of(conn: &mut PgConnection, user_id: Uuid) -> sqlx::Result<u64> {
    Ok(
        sqlx::query!("delete from api_tokens where user_id = $1", user_id,)
            .execute(conn)
            .await?
            .rows_affected(),
    )
}

/// The guest from before accounts whose old cookie hashes to `cookie_hash`, if it may still
/// claim them: a first claim, or another within minutes of it (tabs racing), within a year.
pub async fn claim_legacy(
    conn: &mut PgConnection,
    cookie_hash: &[u8],
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "update legacy_owners set claimed_at = coalesce(claimed_at, now())
         where cookie_hash = $1 and created_at > now() - interval '1 year'
           and (claimed_at is null or claimed_at > now() - interval '5 minutes')
         returning user_id",
        cookie_hash,
    )
    .fetch_optional(conn)
    .await
}

/// The person whose API token has this hash; renews its last use.
pub async fn resolve_token(pool: &PgPool, token_hash: &[u8]) -> sqlx::Result<Option<Resolved>> {
    let holder = sqlx::query_as!(
        Holder,
        r#"select u.id, u.email, u.role,
                  coalesce(t.last_used_at < now() - make_interval(secs => $2), true) as "stale!",
                  $2::float8 as "valid_secs!"
           from api_tokens t join users u on u.id = t.user_id
           where t.token_hash = $1"#,
        token_hash,
        TOUCH_EVERY_SECS,
    )
    .fetch_optional(pool)
    .await?;
    let Some(holder) = holder else {
        return Ok(None);
    };
    if holder.stale {
        sqlx::query!(
            "update api_tokens set last_used_at = now() where token_hash = $1",
            token_hash,
        )
        .execute(pool)
        .await?;
    }
    Ok(Some(holder.resolved()))
}

struct TokenRow {
    id: Uuid,
    name: String,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
}

impl From<TokenRow> for TokenView {
    fn from(row: TokenRow) -> Self {
        TokenView {
            id: row.id,
            name: row.name,
            created_at: row.created_at,
            last_used_at: row.last_used_at,
        }
    }
}

/// Records a new API token of `user_id`.
pub async fn insert_token(
    pool: &PgPool,
    user_id: Uuid,
    name: &str,
    token_hash: &[u8],
) -> sqlx::Result<TokenView> {
    sqlx::query_as!(
        TokenRow,
        "insert into api_tokens (id, user_id, name, token_hash) values ($1, $2, $3, $4)
         returning id, name, created_at, last_used_at",
        Uuid::now_v7(),
        user_id,
        name,
        token_hash,
    )
    .fetch_one(pool)
    .await
    .map(TokenView::from)
}

/// A person's API tokens, oldest first.
pub async fn tokens_of(pool: &PgPool, user_id: Uuid) -> sqlx::Result<Vec<TokenView>> {
    sqlx::query_as!(
        TokenRow,
        "select id, name, created_at, last_used_at from api_tokens where user_id = $1
         order by created_at, id",
        user_id,
    )
    .fetch_all(pool)
    .await
    .map(|rows| rows.into_iter().map(TokenView::from).collect())
}

/// Revokes one of a person's API tokens; `false` when they have none with that id.
pub async fn delete_token(conn: &mut PgConnection, user_id: Uuid, id: Uuid) -> sqlx::Result<bool> {
    let deleted = sqlx::query!(
        "delete from api_tokens where id = $1 and user_id = $2",
        id,
        user_id,
    )
    .execute(conn)
    .await?
    .rows_affected();
    Ok(deleted == 1)
}
