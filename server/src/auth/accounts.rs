//! What people do with their accounts: sign up (a guest keeps what they made), sign in (a new
//! session, the old one ended), sign out, change a password (every session ended), and what
//! the `server user add` command does. Each is one transaction over `store::users` and
//! `store::sessions`; the session token goes back to the HTTP layer for the cookie.

use sqlx::PgPool;

use uuid::Uuid;

use super::{
    Me, Role,
    password::{self, PasswordError},
    secret,
};
use crate::store::{
    notify,
    sessions::{self, Lifetime},
    users::{self, RoleChange},
};

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// A value the person must change, said for them.
    #[error("{0}")]
    Invalid(String),
    #[error("An account with this email already exists.")]
    EmailTaken,
    #[error("The email or password is wrong.")]
    WrongCredentials,
    #[error("Too many sign-ins at once: try again in a moment.")]
    Busy,
    #[error("That would leave no admin: make someone else an admin first.")]
    LastAdmin,
    #[error(transparent)]
    Database(sqlx::Error),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<PasswordError> for AccountError {
    fn from(err: PasswordError) -> Self {
        match err {
            PasswordError::Busy => Self::Busy,
            PasswordError::Internal(err) => Self::Internal(err),
        }
    }
}

/// A second sign-up with the same email that raced the first one's check is still "taken".
impl From<sqlx::Error> for AccountError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::Database(db) if db.constraint() == Some("users_email_key") => {
                Self::EmailTaken
            }
            _ => Self::Database(err),
        }
    }
}

/// The session a browser had before signing in or up: the new one replaces it.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub token: &'a str,
    /// Whose it was (their open streams are told it ended).
    pub user: Uuid,
}

/// A session just started: who, and the token for their cookie.
#[derive(Debug)]
pub struct Started {
    pub me: Me,
    pub token: String,
}

/// Lower-cased and trimmed, or why it is not an email address.
pub fn normalize_email(raw: &str) -> Result<String, AccountError> {
    let email = raw.trim().to_lowercase();
    let valid = email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && email
            .rsplit_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.'));
    if valid {
        Ok(email)
    } else {
        Err(AccountError::Invalid(
            "Enter an email address, like ada@example.com.".into(),
        ))
    }
}

/// A session for a guest from before accounts, whose browser still holds its old cookie.
/// `None` when the cookie is no such guest's, or its claim has lapsed.
pub async fn claim_legacy(
    pool: &PgPool,
    old_cookie: &str,
    lifetime: Lifetime,
) -> sqlx::Result<Option<Started>> {
    let mut tx = pool.begin().await?;
    let Some(owner) = sessions::claim_legacy(&mut tx, &secret::hash(old_cookie)).await? else {
        return Ok(None);
    };
    let token = secret::generate();
    sessions::insert(&mut tx, &secret::hash(&token), owner, lifetime).await?;
    tx.commit().await?;
    let me = Me {
        id: owner,
        email: None,
        role: Role::Guest,
    };
    Ok(Some(Started { me, token }))
}

/// A new guest with a session: a visitor who is making their first thing.
pub async fn start_guest(pool: &PgPool, lifetime: Lifetime) -> sqlx::Result<Started> {
    let mut tx = pool.begin().await?;
    let me = users::insert_guest(&mut tx).await?;
    let token = secret::generate();
    sessions::insert(&mut tx, &secret::hash(&token), me.id, lifetime).await?;
    tx.commit().await?;
    Ok(Started { me, token })
}

/// A new member account, signed in. A guest (`current`) becomes that member, keeping what they
/// made; `ending` is the session the browser had, replaced by the new one.
pub async fn sign_up(
    pool: &PgPool,
    email: &str,
    password: &str,
    current: Option<&Me>,
    ending: Option<Ending<'_>>,
    lifetime: Lifetime,
) -> Result<Started, AccountError> {
    let email = normalize_email(email)?;
    password::check_new(password).map_err(AccountError::Invalid)?;
    // Answered before the (deliberately slow) hash; the insert below still decides races.
    if users::credentials(pool, &email).await?.is_some() {
        return Err(AccountError::EmailTaken);
    }
    let phc = password::hash(password).await?;
    let mut tx = pool.begin().await?;
    let me = match current {
        Some(guest) if guest.role == Role::Guest => {
            users::promote_guest(&mut tx, guest.id, &email, &phc).await?
        }
        _ => users::insert_account(&mut tx, &email, &phc, Role::Member).await?,
    }
    .ok_or(AccountError::EmailTaken)?;
    let token = rotate(&mut tx, &me, ending, lifetime).await?;
    tx.commit().await?;
    Ok(Started { me, token })
}

/// Signs in: a new session for the account, and the browser's old one (`ending`) ended.
pub async fn sign_in(
    pool: &PgPool,
    email: &str,
    password: &str,
    ending: Option<Ending<'_>>,
    lifetime: Lifetime,
) -> Result<Started, AccountError> {
    let email = email.trim().to_lowercase();
    let account = users::credentials(pool, &email).await?;
    let phc = account.as_ref().map(|a| a.password_hash.as_str());
    if !password::verify(password, phc).await? {
        return Err(AccountError::WrongCredentials);
    }
    let me = account.ok_or(AccountError::WrongCredentials)?.me;
    let mut tx = pool.begin().await?;
    let token = rotate(&mut tx, &me, ending, lifetime).await?;
    tx.commit().await?;
    Ok(Started { me, token })
}

/// Ends the session with this token, of `me`.
pub async fn sign_out(pool: &PgPool, me: &Me, token: &str) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sessions::delete(&mut tx, &secret::hash(token)).await?;
    notify::account_changed(&mut tx, me.id).await?;
    tx.commit().await
}

/// Sets a new password once the current one is given and ends every session of the account;
/// with `new_session` (a browser, not a token), starts a new one for it and returns its token.
pub async fn change_password(
    pool: &PgPool,
    me: &Me,
    current: &str,
    new: &str,
    new_session: Option<Lifetime>,
) -> Result<Option<String>, AccountError> {
    let phc = users::password_hash(pool, me.id).await?;
    if phc.is_none() {
        return Err(AccountError::Invalid(
            "Guests have no password: sign up first.".into(),
        ));
    }
    if !password::verify(current, phc.as_deref()).await? {
        return Err(AccountError::Invalid(
            "The current password is wrong.".into(),
        ));
    }
    password::check_new(new).map_err(AccountError::Invalid)?;
    let phc = password::hash(new).await?;
    let mut tx = pool.begin().await?;
    users::set_password(&mut tx, me.id, &phc, None).await?;
    sessions::delete_all_of(&mut tx, me.id).await?;
    notify::account_changed(&mut tx, me.id).await?;
    let token = match new_session {
        Some(lifetime) => Some(rotate(&mut tx, me, None, lifetime).await?),
        None => None,
    };
    tx.commit().await?;
    Ok(token)
}

/// What `server user add` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    Created,
    /// The account existed: its password and role were set, its sessions ended and its API
    /// tokens revoked (an operator's reset is how an account is recovered).
    Reset,
}

/// Creates the account, or resets an existing one's password and role (never leaving no
/// admin).
pub async fn add_or_reset(
    pool: &PgPool,
    email: &str,
    role: Role,
    password: &str,
) -> Result<Added, AccountError> {
    if role == Role::Guest {
        return Err(AccountError::Invalid(
            "An account is an admin, a viewer or a member.".into(),
        ));
    }
    let email = normalize_email(email)?;
    password::check_new(password).map_err(AccountError::Invalid)?;
    let phc = password::hash(password).await?;
    let mut tx = pool.begin().await?;
    let added = match users::id_by_email(&mut tx, &email).await? {
        Some(id) => {
            if users::set_role(&mut tx, id, role).await? == RoleChange::LastAdmin {
                return Err(AccountError::LastAdmin);
            }
            users::set_password(&mut tx, id, &phc, None).await?;
            sessions::delete_all_of(&mut tx, id).await?;
            sessions::delete_tokens_of(&mut tx, id).await?;
            notify::account_changed(&mut tx, id).await?;
            Added::Reset
        }
        None => {
            users::insert_account(&mut tx, &email, &phc, role)
                .await?
                .ok_or(AccountError::EmailTaken)?;
            Added::Created
        }
    };
    tx.commit().await?;
    Ok(added)
}

/// Ends the browser's old session (if any) and starts a new one: a session id is never carried
/// across a sign-in (session fixation).
async fn rotate(
    conn: &mut sqlx::PgConnection,
    me: &Me,
    ending: Option<Ending<'_>>,
    lifetime: Lifetime,
) -> sqlx::Result<String> {
    if let Some(old) = ending {
        sessions::delete(conn, &secret::hash(old.token)).await?;
        notify::account_changed(conn, old.user).await?;
    }
    let token = secret::generate();
    sessions::insert(conn, &secret::hash(&token), me.id, lifetime).await?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::normalize_email;

    #[test]
    fn emails_are_normalised_or_refused() {
        assert_eq!(
            normalize_email("  Ada@Example.COM ").unwrap(),
            "ada@example.com"
        );
        for bad in [
            "",
            "ada",
            "@example.com",
            "ada@localhost",
            "a b@example.com",
        ] {
            assert!(normalize_email(bad).is_err(), "{bad}");
        }
    }
}
