//! `GET /api/queue`, for admins and viewers: the queue's health (`app::queue_health`), as the
//! `/admin` page shows it.

use axum::{Json, extract::State};

use super::{AppState, error::ApiError};
use crate::store::queue_health;
use app::queue_health::QueueHealth;

/// The queue's health: worker processes, backlog, the job waiting longest, throughput.
///
/// `GET /api/queue`: worker processes, backlog by task, the job waiting longest, and
/// throughput over the last hour (by minute) and day (by quarter hour).
#[utoipa::path(
    get,
    path = "/api/queue",
    operation_id = "queueHealth",
    tag = "operations",
    responses((status = 200, description = "The queue's health.", body = QueueHealth))
)]
pub async fn health(State(state): State<AppState>) -> Result<Json<QueueHealth>, ApiError> {
    Ok(Json(queue_health::read(&state.pool).await?))
}
