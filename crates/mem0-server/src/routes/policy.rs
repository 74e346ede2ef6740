//! `/policy`: a tenant's write-policy rules, read and set by its admins without a restart.

use axum::extract::State;
use mem0_core::policy::{PolicyConfig, TenantPolicy};
use mem0_core::{Caller, Role};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, AppJson, AppQuery, ErrorBody};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_policy, set_policy))
}

/// Query of `/policy`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PolicyParams {
    /// Another tenant's policy (global admin only); the caller's own by default.
    #[param(min_length = 1, max_length = 128)]
    pub tenant: Option<String>,
}

/// A tenant's write policy: its own overrides and the global rules they add to.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "tenant": "acme",
    "tenant_policy": {"emails": "redact", "rules": [
        {"name": "project_codename", "terms": ["Bluebird"], "action": "reject"}
    ]},
    "global": {"secrets": "reject", "rules": [], "tenants": {}}
}))]
pub struct PolicyView {
    /// The tenant.
    pub tenant: String,
    /// Its detector actions (overriding the global ones) and its rules (added to the global
    /// ones); empty when it has none.
    pub tenant_policy: TenantPolicy,
    /// The global detector actions and rules, for every tenant (`tenants` left out).
    pub global: PolicyConfig,
}

/// The tenant a request is about: the caller's, or another one for the global admin. Changing
/// or reading a tenant's policy needs an admin of the whole tenant (not one bound to scopes).
fn tenant_of(caller: &Caller, params: PolicyParams) -> Result<String, ApiError> {
    whole_tenant(caller, params.tenant, "the write policy")
}

/// The tenant a request about `what` of a whole tenant is for: the caller's own, or `requested`
/// for the global admin. Needs an admin not bound to users or agents.
pub(crate) fn whole_tenant(caller: &Caller, requested: Option<String>, what: &str) -> Result<String, ApiError> {
    caller.require(Role::Admin)?;
    if !caller.is_tenant_admin() && !caller.global_admin {
        return Err(mem0_core::Error::Forbidden(format!(
            "{what} is the whole tenant's: it needs an admin not bound to users or agents"
        ))
        .into());
    }
    match requested {
        Some(tenant) if tenant != caller.tenant && !caller.global_admin => {
            Err(mem0_core::Error::Forbidden(format!("another tenant's {what} needs the global admin")).into())
        }
        Some(tenant) if tenant.is_empty() || tenant.len() > 128 || tenant.chars().any(char::is_control) => {
            Err(ApiError::validation("tenant", "must be 1 to 128 bytes, without control characters"))
        }
        Some(tenant) => Ok(tenant),
        None => Ok(caller.tenant.clone()),
    }
}

fn view(tenant: String, policy: &PolicyConfig) -> PolicyView {
    PolicyView {
        tenant_policy: policy.tenants.get(&tenant).cloned().unwrap_or_default(),
        global: PolicyConfig { tenants: Default::default(), ..policy.clone() },
        tenant,
    }
}

/// The write policy of the caller's tenant (tenant admin)
#[utoipa::path(
    get,
    path = "/policy",
    tag = "admin",
    params(PolicyParams),
    responses(
        (status = 200, description = "The tenant's overrides and the global rules", body = PolicyView),
        (status = 400, description = "Invalid tenant parameter", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant, or another tenant", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn get_policy(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(params): AppQuery<PolicyParams>,
) -> Result<AppJson<PolicyView>, ApiError> {
    let tenant = tenant_of(&caller, params)?;
    let running = state.memory_handle.runtime.lock().await.policy.clone();
    Ok(AppJson(view(tenant, &running)))
}

/// Set the write policy of the caller's tenant (tenant admin)
///
/// Replaces the tenant's detector actions and rules (an empty object removes them, leaving the
/// global policy). Checked like the configuration files (each rule's pattern must compile), then
/// in effect for the tenant's next write; kept across restarts and, with the history on Postgres,
/// shared with every replica (as `POST /configure` changes are). Recorded in the server's log
/// with the credential.
#[utoipa::path(
    put,
    path = "/policy",
    tag = "admin",
    params(PolicyParams),
    request_body(
        content = TenantPolicy,
        example = json!({"emails": "redact", "rules": [
            {"name": "project_codename", "terms": ["Bluebird"], "action": "reject"},
            {"name": "ticket_ids", "pattern": "TCK-[0-9]{6}", "action": "redact"}
        ]})
    ),
    responses(
        (status = 200, description = "In effect", body = PolicyView),
        (status = 400, description = "Invalid rule (named); nothing changed", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin of the whole tenant, or another tenant", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn set_policy(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(params): AppQuery<PolicyParams>,
    AppJson(body): AppJson<TenantPolicy>,
) -> Result<AppJson<PolicyView>, ApiError> {
    let tenant = tenant_of(&caller, params)?;
    let next = crate::configure::change(&state, &caller, false, |running| {
        let mut next = running.clone();
        if body == TenantPolicy::default() {
            next.policy.tenants.remove(&tenant);
        } else {
            next.policy.tenants.insert(tenant.clone(), body);
        }
        next.validate()?;
        Ok(next)
    })
    .await?;
    tracing::warn!(principal = %caller.principal_id, %tenant, "write policy of a tenant changed");
    Ok(AppJson(view(tenant, &next.policy)))
}
