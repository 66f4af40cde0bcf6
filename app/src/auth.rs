//! Who is asking, and what their role lets them do: the types the server resolves for every
//! request and the pages show (the header, disabled buttons). The rules here are only what the
//! pages show; the server checks every request itself, next to the SQL that reads the rows.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a person may do. Guests are visitors who have not signed in: they own what they make,
/// isolated like members, until they sign up (and keep it) or their session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sees and acts on everything, and manages users.
    Admin,
    /// Sees every job and dataset, changes nothing: for support staff.
    Viewer,
    /// Sees and acts on only their own things.
    Member,
    /// A member without an account.
    Guest,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Viewer, Role::Member, Role::Guest];

    /// The word stored in the database and used by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Viewer => "viewer",
            Self::Member => "member",
            Self::Guest => "guest",
        }
    }

    /// Parses the word; `None` for anything else.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|role| role.as_str() == word)
    }

    /// Sees everyone's jobs and datasets, not only their own.
    pub fn sees_everything(self) -> bool {
        matches!(self, Self::Admin | Self::Viewer)
    }

    /// May create, cancel and retry (their own things, or anything for an admin).
    pub fn may_change(self) -> bool {
        self != Self::Viewer
    }
}

/// The person a request comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Me {
    pub id: Uuid,
    /// `None` for a guest.
    pub email: Option<String>,
    pub role: Role,
}

impl Me {
    /// Whether this person may see what `owner` owns.
    pub fn sees(&self, owner: Uuid) -> bool {
        self.role.sees_everything() || self.id == owner
    }

    /// Whether this person may change what `owner` owns.
    pub fn may_change(&self, owner: Uuid) -> bool {
        self.role == Role::Admin || self.role.may_change() && self.id == owner
    }

    /// "ada@example.com", or "Guest".
    pub fn label(&self) -> String {
        self.email.clone().unwrap_or_else(|| "Guest".to_owned())
    }
}

/// What the header and the sign-in pages need to know.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// `None` when the request carries no session yet (a guest gets one when they first make
    /// something).
    pub me: Option<Me>,
    /// Whether visitors may sign up.
    pub sign_up: bool,
    /// Whether visitors who are not signed in may use the app as guests.
    pub guests: bool,
}

impl SessionView {
    /// Whether the person may create and change things (a visitor may: they become a guest).
    pub fn may_change(&self) -> bool {
        self.me.as_ref().is_none_or(|me| me.role.may_change())
    }
}

/// An account as the admin page lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct UserView {
    pub id: Uuid,
    pub email: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

/// A personal API token as its owner's account page lists it (the secret is shown only once,
/// when it is created).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A token just created: the only time its secret is seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NewToken {
    #[serde(flatten)]
    pub token: TokenView,
    /// `Authorization: Bearer <this>`.
    pub secret: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(role: Role) -> Me {
        Me {
            id: Uuid::from_u128(1),
            email: None,
            role,
        }
    }

    #[test]
    fn roles_see_and_change_what_they_should() {
        let (own, other) = (Uuid::from_u128(1), Uuid::from_u128(2));
        for (role, sees_other, changes_own, changes_other) in [
            (Role::Admin, true, true, true),
            (Role::Viewer, true, false, false),
            (Role::Member, false, true, false),
            (Role::Guest, false, true, false),
        ] {
            let me = me(role);
            assert!(me.sees(own));
            assert_eq!(me.sees(other), sees_other, "{role:?}");
            assert_eq!(me.may_change(own), changes_own, "{role:?}");
            assert_eq!(me.may_change(other), changes_other, "{role:?}");
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
    }
}
