//! The secrets clients hold: session cookies and API tokens. Each is 256 random bits from the
//! operating system, written in URL-safe base64; we store only its SHA-256. A fast hash is
//! right here (unlike passwords): the secret is random and long, so there is nothing to guess.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use sha2::{Digest, Sha256};

/// API tokens start with this, so a leaked one is easy to recognise (and to search for).
pub const TOKEN_PREFIX: &str = "cvt_";

/// Worker tokens (issue 14) start with this: they open the worker routes and nothing else.
pub const WORKER_TOKEN_PREFIX: &str = "cvw_";

/// A new secret: 32 random bytes as 43 characters of URL-safe base64.
pub fn generate() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source works");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A new API token: [`TOKEN_PREFIX`] and a secret.
pub fn generate_token() -> String {
    format!("{TOKEN_PREFIX}{}", generate())
}

/// A new worker token: [`WORKER_TOKEN_PREFIX`] and a secret.
pub fn generate_worker_token() -> String {
    format!("{WORKER_TOKEN_PREFIX}{}", generate())
}

/// What we store of a secret.
pub fn hash(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// Whether `text` has the shape of a secret we issued (so anything else is not even looked up).
pub fn well_formed(text: &str) -> bool {
    let body = text
        .strip_prefix(TOKEN_PREFIX)
        .or_else(|| text.strip_prefix(WORKER_TOKEN_PREFIX))
        .unwrap_or(text);
    body.len() == 43
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_well_formed_and_stored_hashed() {
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        assert!(well_formed(&a) && well_formed(&generate_token()));
        assert!(well_formed(&generate_worker_token()));
        assert!(!well_formed("0b6e1c1e-0000-4000-8000-000000000000"));
        assert!(!well_formed(&format!("{a}x")));
        assert_eq!(hash(&a).len(), 32);
        assert_ne!(hash(&a), hash(&b));
    }
}
