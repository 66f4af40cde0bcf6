//! Where log lines go and how they look: stdout, filtered by `RUST_LOG` (by default `info`,
//! with sqlx's and apalis's own chatter at `warn`), as text for people or as one JSON object
//! per line for a log collector. Each line carries the fields of the spans it was written in:
//! a request's `request_id` (`http::request_id`), a task run's `job_id` and `task`
//! (`jobs::worker`).

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Installs the process's logger (once, at start).
pub fn init(format: Format) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,apalis=warn"));
    let logger = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        Format::Text => logger.init(),
        // The current span's fields at the top (`span`), and the whole stack (`spans`).
        Format::Json => logger
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}
