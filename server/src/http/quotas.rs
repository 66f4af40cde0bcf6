//! Per-owner limits (`config::LimitArgs`) as answers: jobs waiting or running (counted where
//! jobs are created and retried, `jobs::create` and `jobs::control`), and live event streams
//! (counted here; files are counted where they are stored, `store::uploads`; items' payloads
//! where they are added, `store::items`). Over a limit,
//! the answer is `429` with `Retry-After` and which limit it was.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use uuid::Uuid;

use super::error::ApiError;

/// The answer for an owner with `limit` jobs waiting or running already.
pub fn too_many_jobs(limit: i64) -> ApiError {
    ApiError::Limited {
        message: format!(
            "You have {limit} jobs waiting or running, the most at once. Try again when some \
             have finished (or cancel some)."
        ),
        retry_after: 30,
    }
}

/// The answer for adding items past `limit` bytes of items kept by the job owner's jobs.
pub fn too_many_item_bytes(limit: i64) -> ApiError {
    ApiError::Limited {
        message: format!(
            "The job's owner keeps {limit} bytes of items at most, and these would pass it: \
             delete finished jobs no longer needed (or wait for them to expire), then add more."
        ),
        retry_after: 3600,
    }
}

/// The live event streams this process holds open, per owner.
#[derive(Debug, Default)]
pub struct Streams {
    open: Mutex<HashMap<Uuid, usize>>,
}

/// One open stream, counted until it is dropped (the stream ended or its client left).
#[derive(Debug)]
pub struct StreamSlot {
    streams: Arc<Streams>,
    owner: Uuid,
}

impl Streams {
    /// A place for one more of `owner`'s streams, if they hold fewer than `limit`.
    pub fn open(self: &Arc<Self>, owner: Uuid, limit: usize) -> Result<StreamSlot, ApiError> {
        let mut open = self.open.lock().expect("stream counts are never poisoned");
        let count = open.entry(owner).or_default();
        if *count >= limit {
            return Err(ApiError::Limited {
                message: format!(
                    "You have {limit} live views open, the most at once. Close some tabs and \
                     reload."
                ),
                retry_after: 10,
            });
        }
        *count += 1;
        Ok(StreamSlot {
            streams: Arc::clone(self),
            owner,
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self
            .streams
            .open
            .lock()
            .expect("stream counts are never poisoned");
        if let Some(count) = open.get_mut(&self.owner) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.owner);
            }
        }
    }
}
