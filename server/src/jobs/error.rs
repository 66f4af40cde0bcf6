//! How a task run ends when it does not simply succeed: told to stop, refused for good, or
//! failed in a way worth another attempt. The runner (`worker::Runner`) acts on each: a
//! stopped run gives its lease back without counting the attempt, a refusal fails the job with
//! its reason for people, anything else counts an attempt and runs again after a backoff.

use std::io;

use app::model::Remedy;
use tokio::task::JoinError;

use crate::store::uploads::UploadError;

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The job was cancelled, the lease lost, or the process is stopping.
    #[error("stopped: the job was cancelled, its lease lost, or the worker is stopping")]
    Stopped,
    /// The file or the job cannot succeed however often it is tried; the reason is for people.
    #[error("refused: {}", .0.reason)]
    Refused(Refusal),
    /// Something on our side failed; another attempt may succeed.
    #[error(transparent)]
    Retry(#[from] Cause),
}

/// Why a job cannot succeed, for people, and what fixes it when something does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub remedy: Option<Remedy>,
}

impl TaskError {
    /// A refusal nothing but another file or request fixes.
    pub fn refused(reason: impl Into<String>) -> Self {
        Self::Refused(Refusal {
            reason: reason.into(),
            remedy: None,
        })
    }
}

/// What failed on our side.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("queue: {0}")]
    Queue(#[from] apalis_postgres::Error),
    #[error("i/o: {0}")]
    Io(io::Error),
    #[error("the task crashed: {0}")]
    Crashed(#[from] JoinError),
}

/// The `io::Error` payload that carries a stop through blocking readers and writers (which
/// speak only `io::Error`), so it becomes [`TaskError::Stopped`] again on the other side.
#[derive(Debug, thiserror::Error)]
#[error("stopped")]
pub struct StopSignal;

/// An `io::Error` that says the run was told to stop.
pub fn stopped_io() -> io::Error {
    io::Error::other(StopSignal)
}

impl From<sqlx::Error> for TaskError {
    fn from(err: sqlx::Error) -> Self {
        Self::Retry(Cause::Database(err))
    }
}

impl From<apalis_postgres::Error> for TaskError {
    fn from(err: apalis_postgres::Error) -> Self {
        Self::Retry(Cause::Queue(err))
    }
}

impl From<JoinError> for TaskError {
    fn from(err: JoinError) -> Self {
        Self::Retry(Cause::Crashed(err))
    }
}

/// Saving a file the job wrote: a broken stream says why (a stop stays a stop); the limits of
/// people's uploads do not apply to it.
impl From<UploadError> for TaskError {
    fn from(err: UploadError) -> Self {
        match err {
            UploadError::Database(err) => err.into(),
            UploadError::Body(err) => err.into(),
            other => io::Error::other(other).into(),
        }
    }
}

impl From<io::Error> for TaskError {
    fn from(err: io::Error) -> Self {
        if err.get_ref().is_some_and(|inner| inner.is::<StopSignal>()) {
            Self::Stopped
        } else {
            Self::Retry(Cause::Io(err))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_survives_a_trip_through_io() {
        assert!(matches!(TaskError::from(stopped_io()), TaskError::Stopped));
        let other = io::Error::other("disk full");
        assert!(matches!(
            TaskError::from(other),
            TaskError::Retry(Cause::Io(_))
        ));
    }
}
