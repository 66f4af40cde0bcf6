//! Why a task failed in a way worth retrying. Failures that are the file's fault never get here:
//! they fail the job with a message for the person and end the task successfully, so the queue
//! does not retry them.

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("queue: {0}")]
    Queue(#[from] apalis_postgres::Error),
    #[error("reading the upload: {0}")]
    Io(#[from] std::io::Error),
    #[error("the task crashed: {0}")]
    Crashed(#[from] tokio::task::JoinError),
}
