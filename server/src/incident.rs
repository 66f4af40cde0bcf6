//! Failures people are not meant to read (database, I/O, crashes, panics): their text can hold
//! addresses, SQL and paths. Each is logged once under a short reference, and people see a
//! plain sentence with that reference, which is all an operator needs to find it in the log.

use std::fmt::Display;

use uuid::Uuid;

/// A short, random reference for one failure (8 hex digits: unique enough to grep a log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference(String);

impl Reference {
    fn new() -> Self {
        Reference(Uuid::new_v4().simple().to_string()[..8].to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What people are told.
    pub fn sentence(&self) -> String {
        format!("Something went wrong on our side (reference {}).", self.0)
    }
}

impl Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Logs `err` (an error: something is broken) under a new reference.
pub fn error(context: &str, err: &dyn Display) -> Reference {
    let reference = Reference::new();
    tracing::error!(%reference, "{context}: {err}");
    reference
}

/// Logs `err` (a warning: it will be tried again) under a new reference.
pub fn warning(context: &str, err: &dyn Display) -> Reference {
    let reference = Reference::new();
    tracing::warn!(%reference, "{context}: {err}");
    reference
}
