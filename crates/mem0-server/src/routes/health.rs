//! `GET /health` (the process answers) and `GET /ready` (the stores answer).

use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, AppJson, ErrorBody, ErrorCode};
use crate::state::AppState;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(health)).routes(routes!(ready))
}

/// Liveness or readiness status.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StatusResponse {
    /// `ok` or `ready`.
    pub status: String,
    /// Something an operator should know while the server still serves: e.g. a runtime
    /// configuration changed through another replica that this one could not apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Liveness: the process is up
#[utoipa::path(get, path = "/health", tag = "health", responses((status = 200, description = "Alive", body = StatusResponse)))]
pub async fn health() -> AppJson<StatusResponse> {
    AppJson(StatusResponse { status: "ok".to_owned(), detail: None })
}

/// Readiness: the vector store and the history volume answer
#[utoipa::path(
    get,
    path = "/ready",
    tag = "health",
    responses(
        (status = 200, description = "Ready", body = StatusResponse),
        (status = 503, description = "A store is unavailable (`store_unavailable`), or the server is shutting down (`draining`)", body = ErrorBody),
    )
)]
pub async fn ready(State(state): State<AppState>) -> Result<AppJson<StatusResponse>, ApiError> {
    if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::new(ErrorCode::Draining, "shutting down: send requests to another replica"));
    }
    state.memory().ready().await?;
    let detail = state.memory_handle.config_problem.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    Ok(AppJson(StatusResponse { status: "ready".to_owned(), detail }))
}
