//! Passwords: Argon2id (the `argon2` crate, OWASP's recommended parameters: 19 MiB, 2 passes),
//! hashed and checked on blocking threads, at most [`AT_ONCE`] at a time so a flood of sign-in
//! attempts costs bounded memory and leaves the runtime free; past [`WAITING`] requests waiting
//! their turn, more are turned away ([`PasswordError::Busy`], a `429`) rather than queued. A
//! password is never stored or logged; only its PHC string is kept.

use std::sync::LazyLock;

use argon2::{
    Argon2,
    password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
};
use tokio::sync::Semaphore;

/// Hashes computed at once, process-wide (each holds 19 MiB while it runs).
const AT_ONCE: usize = 2;

/// Hashes waiting for a turn at most; more are refused.
const WAITING: usize = 64;

/// The shortest and longest passwords accepted.
pub const MIN_CHARS: usize = 8;
pub const MAX_CHARS: usize = 256;

static SLOTS: Semaphore = Semaphore::const_new(AT_ONCE);
static QUEUE: Semaphore = Semaphore::const_new(WAITING);

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("too many passwords are being checked at once")]
    Busy,
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// Checked against when no account has the email, so a wrong email takes as long as a wrong
/// password and sign-in does not tell which emails have accounts.
static DECOY: LazyLock<String> =
    LazyLock::new(|| hash_now(&crate::auth::secret::generate()).expect("hashing works"));

/// Why a new password is refused, for the person choosing it.
pub fn check_new(password: &str) -> Result<(), String> {
    let chars = password.chars().count();
    if chars < MIN_CHARS {
        Err(format!("A password has at least {MIN_CHARS} characters."))
    } else if chars > MAX_CHARS {
        Err(format!("A password has at most {MAX_CHARS} characters."))
    } else {
        Ok(())
    }
}

/// The PHC string of `password` (Argon2id, a random salt).
pub async fn hash(password: &str) -> Result<String, PasswordError> {
    let password = password.to_owned();
    blocking(move || hash_now(&password)).await
}

/// Whether `password` matches `phc`; with `None` (no such account) it checks a decoy and
/// answers `false`, taking as long.
pub async fn verify(password: &str, phc: Option<&str>) -> Result<bool, PasswordError> {
    let (password, phc) = (password.to_owned(), phc.map(str::to_owned));
    blocking(move || {
        let known = phc.is_some();
        let phc = phc.unwrap_or_else(|| DECOY.clone());
        let parsed = PasswordHash::new(&phc).map_err(|err| anyhow::anyhow!("{err}"))?;
        let matches = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        Ok(known && matches)
    })
    .await
}

fn hash_now(password: &str) -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    let salt = SaltString::encode_b64(&bytes).map_err(|err| anyhow::anyhow!("{err}"))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|err| anyhow::anyhow!("{err}"))?
        .to_string())
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> Result<T, PasswordError> {
    let waiting = QUEUE.try_acquire().map_err(|_| PasswordError::Busy)?;
    let slot = SLOTS.acquire().await.map_err(anyhow::Error::from)?;
    // The permits go with the work: a client that hangs up does not free them while the hash
    // (which cannot be stopped) still runs.
    Ok(tokio::task::spawn_blocking(move || {
        let _held = (waiting, slot);
        work()
    })
    .await
    .map_err(anyhow::Error::from)??)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashes_verify_only_their_password() {
        let phc = hash("correct horse").await.unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(!phc.contains("correct horse"));
        assert!(verify("correct horse", Some(&phc)).await.unwrap());
        assert!(!verify("wrong horse", Some(&phc)).await.unwrap());
        assert!(!verify("correct horse", None).await.unwrap());
        assert!(check_new("short").is_err() && check_new("long enough").is_ok());
    }
}
