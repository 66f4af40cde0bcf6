//! Live job progress: one `LISTEN job_progress` per process ([`Hub`]), fanned out through a
//! broadcast channel to every SSE stream ([`feed`]). Never one database connection per browser.

pub mod feed;
mod hub;

pub use hub::{Change, Hub};
