//! All SQL, one module per concern. Callers get domain types back, never rows.
//!
//! State changes name the state they expect (`… where status = 'running'`), so a late or
//! duplicated message can never move a job that has moved on.

pub mod callbacks;
pub mod chunks;
pub mod datasets;
pub mod errors;
pub mod exports;
pub mod jobs;
pub mod leases;
pub mod notify;
pub mod retention;
pub mod sessions;
pub mod uploads;
pub mod users;
