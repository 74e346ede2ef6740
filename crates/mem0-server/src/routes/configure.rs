//! `/configure`: view (redacted), list providers, change at runtime.

use axum::extract::State;
use mem0_core::Role;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::configure::RuntimeConfig;
use crate::error::{ApiError, AppJson, ErrorBody};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_configuration, set_configuration)).routes(routes!(list_providers))
}

/// Providers this build can use.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProvidersResponse {
    /// Embedders.
    pub embedder: Vec<String>,
    /// Vector stores.
    pub vector_store: Vec<String>,
    /// LLMs.
    pub llm: Vec<String>,
}

/// The configuration in effect, secrets never included (admin)
#[utoipa::path(
    get,
    path = "/configure",
    tag = "admin",
    responses(
        (status = 200, description = "Safe fields only", body = Object),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn get_configuration(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
) -> Result<AppJson<Value>, ApiError> {
    caller.require(Role::Admin)?;
    let mut running = state.memory_handle.runtime.lock().await.clone();
    if !caller.global_admin {
        // Another tenant's rules are not this admin's to read.
        running.policy.tenants.retain(|tenant, _| *tenant == caller.tenant);
    }
    Ok(AppJson(crate::configure::redacted_view(&running, &state.memory(), &state.settings)))
}

/// Change the configuration at runtime (global admin)
///
/// The change (a JSON merge patch over the running configuration) is validated with the startup
/// rules, the new providers are built and checked against the stores, and only then swapped in;
/// a failed change leaves the running configuration as it was. Secrets are not accepted here:
/// they come from the environment or secret files.
#[utoipa::path(
    post,
    path = "/configure",
    tag = "admin",
    request_body(
        content = RuntimeConfig,
        description = "A JSON merge patch (RFC 7396) of the runtime configuration: only the keys to change, \
                       `null` to reset one to its default; no secrets."
    ),
    responses(
        (status = 200, description = "Applied; the new configuration", body = Object),
        (status = 400, description = "Rejected, with the reason; nothing changed", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not the global admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn set_configuration(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppJson(body): AppJson<Value>,
) -> Result<AppJson<Value>, ApiError> {
    Ok(AppJson(crate::configure::apply(&state, &caller, body).await?))
}

/// Providers this build supports
#[utoipa::path(
    get,
    path = "/configure/providers",
    tag = "admin",
    responses(
        (status = 200, description = "Provider names", body = ProvidersResponse),
        (status = 401, description = "No valid credentials", body = ErrorBody),
    )
)]
pub async fn list_providers(RequestCaller(_caller): RequestCaller) -> AppJson<ProvidersResponse> {
    AppJson(ProvidersResponse {
        embedder: vec!["local".into(), "openai".into()],
        vector_store: vec!["sqlite".into(), "pgvector".into()],
        llm: vec!["openai".into(), "anthropic".into()],
    })
}
