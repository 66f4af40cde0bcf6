//! Live job progress: one `LISTEN job_progress` per process ([`Hub`]); one reader of the jobs it
//! reports changed ([`views`]), whatever the number of watchers; and a small [`feed`] per SSE
//! stream that keeps what its reader may see. Never one database connection per browser, nor
//! one query per change per browser.

pub mod feed;
mod hub;
pub mod recent;
pub mod remembered;
pub mod views;

pub use hub::{Change, Hub, ItemsReady};
pub use views::Views;
