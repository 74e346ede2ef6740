//! API key management (admin): create (the key is shown once), list, revoke.

use axum::extract::State;
use axum::http::StatusCode;
use mem0_core::api_keys::{ApiKeyInfo, CreatedApiKey, NewApiKey};
use mem0_core::{Role, ScopeGrant};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::MessageResponse;
use crate::error::{ApiError, AppJson, AppPath, ErrorBody, ErrorCode};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_api_key, list_api_keys)).routes(routes!(revoke_api_key))
}

/// Body of `POST /api-keys`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKeyRequest {
    /// Free text to recognise the key by (1 to 200 bytes after trimming).
    #[schema(example = "support bot", min_length = 1)]
    pub label: String,
    /// `read`, `write` or `admin`.
    #[schema(example = "write")]
    pub role: Role,
    /// Only these users' memories (leave out for every user of the tenant).
    #[serde(default)]
    #[schema(min_items = 1, max_items = 1000)]
    pub user_ids: Option<Vec<String>>,
    /// Only these agents' memories (leave out for every agent).
    #[serde(default)]
    #[schema(min_items = 1, max_items = 1000)]
    pub agent_ids: Option<Vec<String>>,
    /// Tenant of the key; only the global admin may name another tenant than its own.
    #[serde(default)]
    pub tenant: Option<String>,
}

/// The keys of a tenant.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApiKeyList {
    /// Newest first, revoked ones included.
    pub results: Vec<ApiKeyInfo>,
}

/// Create an API key (admin); the key is returned once
#[utoipa::path(
    post,
    path = "/api-keys",
    tag = "admin",
    request_body = CreateApiKeyRequest,
    responses(
        (status = 201, description = "Created; `key` is shown only now", body = CreatedApiKey),
        (status = 400, description = "Invalid input", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin, or asking for more than the creator may do", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn create_api_key(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppJson(body): AppJson<CreateApiKeyRequest>,
) -> Result<(StatusCode, AppJson<CreatedApiKey>), ApiError> {
    let new = NewApiKey {
        tenant: body.tenant,
        label: body.label,
        role: body.role,
        grant: ScopeGrant { user_ids: body.user_ids, agent_ids: body.agent_ids },
    };
    let created = state.api_keys.create(&caller, new).await?;
    tracing::info!(key_id = %created.info.id, tenant = %created.info.tenant, role = ?created.info.role, "api key created");
    Ok((StatusCode::CREATED, AppJson(created)))
}

/// List the API keys of the caller's tenant (admin)
#[utoipa::path(
    get,
    path = "/api-keys",
    tag = "admin",
    responses(
        (status = 200, description = "Keys, newest first", body = ApiKeyList),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list_api_keys(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
) -> Result<AppJson<ApiKeyList>, ApiError> {
    let keys = state.api_keys.list(&caller).await?;
    Ok(AppJson(ApiKeyList { results: keys }))
}

/// Revoke an API key (admin)
#[utoipa::path(
    delete,
    path = "/api-keys/{key_id}",
    tag = "admin",
    params(("key_id" = Uuid, Path, description = "Key id")),
    responses(
        (status = 200, description = "Revoked", body = MessageResponse),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 404, description = "No such key, or already revoked", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn revoke_api_key(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(key_id): AppPath<String>,
) -> Result<AppJson<MessageResponse>, ApiError> {
    let id = Uuid::parse_str(&key_id)
        .map_err(|_| ApiError::new(ErrorCode::ValidationFailed, "invalid key_id: expected a UUID"))?;
    state.api_keys.revoke(&caller, id).await?;
    tracing::info!(key_id = %id, "api key revoked");
    Ok(AppJson(MessageResponse { message: "API key revoked".to_owned() }))
}
