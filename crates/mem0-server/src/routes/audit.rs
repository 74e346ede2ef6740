//! `GET /audit`: the audit trail (admin).

use axum::extract::State;
use mem0_core::history::{AuditAction, AuditEntry, AuditQuery};
use mem0_core::Role;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{parse_memory_id, ApiError, AppJson, AppQuery, ErrorBody};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

/// Query of `GET /audit`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQueryParams {
    /// Only entries of this credential (`key:<id>`, `jwt:<sub>`, `admin`, `local`).
    pub principal_id: Option<String>,
    /// Only entries about this memory.
    #[param(format = Uuid)]
    pub memory_id: Option<String>,
    /// Only these actions, comma-separated (`get,search_hit`): get, list, search_hit, history,
    /// add, update, delete, reset, policy_redact, policy_reject, export, import.
    pub action: Option<String>,
    /// Only entries at or after this time (RFC 3339).
    #[param(format = DateTime, example = "2026-12-01T00:00:00Z")]
    pub since: Option<String>,
    /// Only entries before this time (RFC 3339).
    #[param(format = DateTime)]
    pub until: Option<String>,
    /// Entries per page, 1 to 500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// The `next` value of the previous page.
    pub before: Option<i64>,
}

/// A page of the audit trail.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "results": [{
        "id": 812,
        "at": "2026-12-01T09:30:12.402113Z",
        "tenant": "acme",
        "principal_id": "key:3f6c2a9e0b1d4c55",
        "action": "search_hit",
        "memory_id": "8c3e5d4a-1f2b-4c6d-9e8f-0a1b2c3d4e5f",
        "request_id": "5b0f7c2e9a4d4e1f8c6b3a2d1e0f9c8b",
        "detail": null
    }],
    "next": 812
}))]
pub struct AuditResponse {
    /// Newest first.
    pub results: Vec<AuditEntry>,
    /// Pass as `before` for the next page; `null` on the last.
    pub next: Option<i64>,
}

/// The audit trail of the caller's tenant, newest first (admin)
///
/// One entry per memory read (get, listing page, search hit, history) or changed (add, update,
/// delete), per reset and per write-policy decision (redaction or refusal, naming the rule and
/// the field), with the credential and the request id. Never memory text or queries. An admin
/// bound to some users or agents sees only its own entries and those of the keys it manages.
/// Entries are written in the background: they show up a moment after the response. Kept for
/// `audit.retention_days`.
#[utoipa::path(
    get,
    path = "/audit",
    tag = "admin",
    params(AuditQueryParams),
    responses(
        (status = 200, description = "One page", body = AuditResponse),
        (status = 400, description = "Invalid filter or limit", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list_audit(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(params): AppQuery<AuditQueryParams>,
) -> Result<AppJson<AuditResponse>, ApiError> {
    caller.require(Role::Admin)?;
    let limit = params.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::validation("limit", "must be between 1 and 500"));
    }
    let memory_id = params.memory_id.as_deref().map(parse_memory_id).transpose()?;
    let actions = params
        .action
        .as_deref()
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .map(|name| {
                    AuditAction::parse(name).ok_or_else(|| {
                        let known: Vec<&str> = AuditAction::ALL.iter().map(|action| action.as_str()).collect();
                        ApiError::validation(
                            "action",
                            format!(
                                "unknown action `{}`; one of {}",
                                name.chars().take(32).collect::<String>(),
                                known.join(", ")
                            ),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let since = params.since.as_deref().map(|raw| super::parse_rfc3339("since", raw)).transpose()?;
    let until = params.until.as_deref().map(|raw| super::parse_rfc3339("until", raw)).transpose()?;
    let mut principals = super::visible_principals(&state, &caller).await?;
    if let Some(wanted) = params.principal_id {
        principals = Some(match principals {
            Some(allowed) => allowed.into_iter().filter(|principal| *principal == wanted).collect(),
            None => vec![wanted],
        });
    }
    let query = AuditQuery {
        tenant: (!caller.global_admin).then(|| caller.tenant.clone()),
        principals,
        memory_id,
        actions,
        since,
        until,
        before: params.before,
        limit,
    };
    let results = state.audit_log.query(&query).await?;
    let next = (results.len() == limit).then(|| results.last().map(|entry| entry.id)).flatten();
    Ok(AppJson(AuditResponse { results, next }))
}
