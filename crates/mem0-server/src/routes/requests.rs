//! `GET /requests`: the request log (admin).

use axum::extract::State;
use mem0_core::history::RequestLogEntry;
use mem0_core::Role;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, AppJson, AppQuery, ErrorBody};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_requests))
}

/// Query of `GET /requests`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RequestsQuery {
    /// Entries per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<usize>,
    /// The `next` value of the previous page.
    pub before: Option<i64>,
}

/// A page of the request log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RequestsResponse {
    /// Newest first.
    pub results: Vec<RequestLogEntry>,
    /// Pass as `before` for the next page; `null` on the last.
    pub next: Option<i64>,
}

/// Recent requests of the caller's tenant, newest first (admin)
///
/// An admin bound to some users or agents sees only its own requests and those of the keys it
/// manages. The log is written in the background: a request shows up a moment after it finished.
#[utoipa::path(
    get,
    path = "/requests",
    tag = "admin",
    params(RequestsQuery),
    responses(
        (status = 200, description = "One page", body = RequestsResponse),
        (status = 400, description = "Invalid limit", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list_requests(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(query): AppQuery<RequestsQuery>,
) -> Result<AppJson<RequestsResponse>, ApiError> {
    caller.require(Role::Admin)?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::validation("limit", "must be between 1 and 200"));
    }
    let tenant = (!caller.global_admin).then_some(caller.tenant.as_str());
    let principals = super::visible_principals(&state, &caller).await?;
    let entries = state.requests.recent(tenant, principals.as_deref(), query.before, limit).await?;
    let next = (entries.len() == limit).then(|| entries.last().map(|entry| entry.id)).flatten();
    let results = entries;
    Ok(AppJson(RequestsResponse { results, next }))
}
