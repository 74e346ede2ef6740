//! Administrative routes: `POST /reset`.

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::MessageResponse;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::error::{ApiError, AppJson, AppQuery, ErrorBody};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(reset))
}

/// What `POST /reset` wipes (schema only).
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ResetScope {
    /// The caller's tenant.
    Tenant,
    /// Every tenant (global admin only).
    Global,
}

/// Query of `POST /reset`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ResetQuery {
    /// `tenant` (default) or `global` (every tenant; global admin only).
    #[param(value_type = Option<ResetScope>, inline)]
    pub scope: Option<String>,
}

/// Delete every memory, history entry and buffered message of the caller's tenant
#[utoipa::path(
    post,
    path = "/reset",
    tag = "admin",
    params(ResetQuery),
    responses(
        (status = 400, description = "Unknown scope", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 200, description = "Everything of the tenant deleted", body = MessageResponse),
        (status = 403, description = "Needs an unrestricted admin", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn reset(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(query): AppQuery<ResetQuery>,
) -> Result<AppJson<MessageResponse>, ApiError> {
    match query.scope.as_deref().unwrap_or("tenant") {
        "tenant" => {
            state.memory().reset(&caller).await?;
            tracing::warn!(tenant = %caller.tenant, principal = %caller.principal_id, "tenant reset");
        }
        "global" => {
            state.memory().reset_all(&caller).await?;
            tracing::warn!(principal = %caller.principal_id, "global reset: every tenant's memories deleted");
        }
        _ => return Err(ApiError::validation("scope", "must be tenant or global")),
    }
    Ok(AppJson(MessageResponse { message: "All memories reset".to_owned() }))
}
