//! Identity: who a request comes from, and whose things it may see and change.
//!
//! A request is resolved once, by `http::identity`, into an optional [`Me`]: from an
//! `Authorization: Bearer` API token, or else from the session cookie. Handlers turn it into a
//! [`Sees`] and hand that to the store, whose queries filter on the owner in SQL, next to the
//! rows they read: someone else's job answers exactly as a missing one does. Changes also need
//! [`Role::may_change`]: a viewer sees everything and changes nothing.
//!
//! - [`secret`]: the random session and API tokens, stored only as hashes.
//! - [`password`]: Argon2id hashing on blocking threads.
//! - [`accounts`]: signing up, in and out, changing passwords, guests, the CLI's accounts.

pub mod accounts;
pub mod identities;
pub mod password;
pub mod secret;

pub use app::auth::{Me, Role};
use uuid::Uuid;

/// Whose things a read covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sees {
    /// Admins and viewers.
    Everything,
    /// Members and guests: their own.
    OwnedBy(Uuid),
    /// A visitor with no session yet owns nothing.
    Nothing,
}

impl Sees {
    pub fn of(me: Option<&Me>) -> Self {
        match me {
            Some(me) if me.role.sees_everything() => Self::Everything,
            Some(me) => Self::OwnedBy(me.id),
            None => Self::Nothing,
        }
    }

    /// Whether `owner`'s things are among those covered.
    pub fn covers(self, owner: Uuid) -> bool {
        match self {
            Self::Everything => true,
            Self::OwnedBy(me) => me == owner,
            Self::Nothing => false,
        }
    }

    /// The owner a query filters on, `None` for every owner: bound as `$n` in
    /// `($n::uuid is null or owner = $n)`. Nobody owns the nil id.
    pub fn owner_filter(self) -> Option<Uuid> {
        match self {
            Self::Everything => None,
            Self::OwnedBy(owner) => Some(owner),
            Self::Nothing => Some(Uuid::nil()),
        }
    }
}
