//! People: accounts (an email, an Argon2id hash, a role) and guests (neither), who own what
//! they create.

use app::auth::{Me, Role, UserView};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

struct UserRow {
    id: Uuid,
    email: Option<String>,
    role: String,
    created_at: DateTime<Utc>,
}

/// The role column's check constraint admits only the four words.
pub(super) fn role(word: &str) -> Role {
    Role::parse(word).unwrap_or(Role::Guest)
}

impl From<UserRow> for Me {
    fn from(row: UserRow) -> Self {
        Me {
            id: row.id,
            email: row.email,
            role: role(&row.role),
        }
    }
}

/// An account with its password hash, for signing in.
pub struct Credentials {
    pub me: Me,
    pub password_hash: String,
}

/// A new guest: a visitor who made something before signing in.
pub async fn insert_guest(conn: &mut PgConnection) -> sqlx::Result<Me> {
    let id = Uuid::now_v7();
    sqlx::query!("insert into users (id, role) values ($1, 'guest')", id,)
        .execute(conn)
        .await?;
    Ok(Me {
        id,
        email: None,
        role: Role::Guest,
    })
}

/// A new account; `None` when the email is taken.
pub async fn insert_account(
    conn: &mut PgConnection,
    email: &str,
    password_hash: &str,
    role: Role,
) -> sqlx::Result<Option<Me>> {
    sqlx::query_as!(
        UserRow,
        "insert into users (id, email, password_hash, role) values ($1, $2, $3, $4)
         on conflict (email) do nothing
         returning id, email, role, created_at",
        Uuid::now_v7(),
        email,
        password_hash,
        role.as_str(),
    )
    .fetch_optional(conn)
    .await
    .map(|row| row.map(Me::from))
}

/// A guest becomes a member with this email and password, keeping their id (and so everything
/// they own). `None` when the user is not a guest or the email is taken.
pub async fn promote_guest(
    conn: &mut PgConnection,
    id: Uuid,
    email: &str,
    password_hash: &str,
) -> sqlx::Result<Option<Me>> {
    sqlx::query_as!(
        UserRow,
        "update users set email = $2, password_hash = $3, role = 'member'
         where id = $1 and role = 'guest'
           and not exists (select 1 from users where email = $2)
         returning id, email, role, created_at",
        id,
        email,
        password_hash,
    )
    .fetch_optional(conn)
    .await
    .map(|row| row.map(Me::from))
}

/// The account with this email, and its password hash.
pub async fn credentials(pool: &PgPool, email: &str) -> sqlx::Result<Option<Credentials>> {
    let row = sqlx::query!(
        r#"select id, email, role, password_hash as "password_hash!" from users
           where email = $1 and password_hash is not null"#,
        email,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|row| Credentials {
        me: Me {
            id: row.id,
            email: row.email,
            role: role(&row.role),
        },
        password_hash: row.password_hash,
    }))
}

/// The password hash of an account.
pub async fn password_hash(pool: &PgPool, id: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("select password_hash from users where id = $1", id)
        .fetch_optional(pool)
        .await
        .map(Option::flatten)
}

/// Sets an account's password (and, when given, its role); `false` when no account has the id.
pub async fn set_password(
    conn: &mut PgConnection,
    id: Uuid,
    password_hash: &str,
    role: Option<Role>,
) -> sqlx::Result<bool> {
    let changed = sqlx::query!(
        "update users set password_hash = $2, role = coalesce($3, role)
         where id = $1 and role <> 'guest'",
        id,
        password_hash,
        role.map(Role::as_str),
    )
    .execute(conn)
    .await?
    .rows_affected();
    Ok(changed == 1)
}

/// The id of the account with this email.
pub async fn id_by_email(conn: &mut PgConnection, email: &str) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!("select id from users where email = $1", email,)
        .fetch_optional(conn)
        .await
}

/// Every account, oldest first (guests are not listed).
pub async fn accounts(pool: &PgPool) -> sqlx::Result<Vec<UserView>> {
    let rows = sqlx::query_as!(
        UserRow,
        "select id, email, role, created_at from users where role <> 'guest'
         order by created_at, id",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(UserView::from).collect())
}

/// One account, as the admin page lists it.
pub async fn account(pool: &PgPool, id: Uuid) -> sqlx::Result<Option<UserView>> {
    let row = sqlx::query_as!(
        UserRow,
        "select id, email, role, created_at from users where id = $1 and role <> 'guest'",
        id,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(UserView::from))
}

impl From<UserRow> for UserView {
    fn from(row: UserRow) -> Self {
        UserView {
            id: row.id,
            email: row.email.unwrap_or_default(),
            role: role(&row.role),
            created_at: row.created_at,
        }
    }
}

/// What became of a role change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleChange {
    Changed,
    NoSuchAccount,
    /// It would leave no admin.
    LastAdmin,
}

/// Gives an account another role (never `guest`), keeping at least one admin. Admins changing
/// roles at once are serialized by a lock on the admins' rows.
pub async fn set_role(
    conn: &mut PgConnection,
    id: Uuid,
    new_role: Role,
) -> sqlx::Result<RoleChange> {
    let admins =
        sqlx::query_scalar!("select id from users where role = 'admin' order by id for update")
            .fetch_all(&mut *conn)
            .await?;
    if new_role != Role::Admin && admins == [id] {
        return Ok(RoleChange::LastAdmin);
    }
    let changed = sqlx::query!(
        "update users set role = $2 where id = $1 and role <> 'guest'",
        id,
        new_role.as_str(),
    )
    .execute(conn)
    .await?
    .rows_affected();
    Ok(if changed == 1 {
        RoleChange::Changed
    } else {
        RoleChange::NoSuchAccount
    })
}
