//! Administrative routes: `POST /reset`.

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::MessageResponse;
use crate::error::{ApiError, AppJson, ErrorBody};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(reset))
}

/// Delete every memory, history entry and buffered message of the caller's tenant
#[utoipa::path(
    post,
    path = "/reset",
    tag = "admin",
    responses(
        (status = 200, description = "Everything of the tenant deleted", body = MessageResponse),
        (status = 403, description = "Needs an unrestricted admin", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn reset(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
) -> Result<AppJson<MessageResponse>, ApiError> {
    state.memory.reset(&caller).await?;
    tracing::warn!(tenant = %caller.tenant, principal = %caller.principal_id, "tenant reset");
    Ok(AppJson(MessageResponse { message: "All memories reset".to_owned() }))
}
