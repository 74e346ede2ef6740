//! `GET /me`: who the credentials are (tenant, role, the scopes they reach), for clients such as
//! the dashboard that show only what the caller may do. The server checks every call anyway.

use mem0_core::Role;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{AppJson, ErrorBody};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_me))
}

/// The caller.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MeResponse {
    /// Its tenant.
    pub tenant: String,
    /// The key's id, or the token's subject.
    pub principal_id: String,
    /// `read`, `write` or `admin`.
    #[schema(value_type = String, example = "write")]
    pub role: Role,
    /// The users it is bound to; `null`: any user of the tenant.
    pub user_ids: Option<Vec<String>>,
    /// The agents it is bound to; `null`: any agent.
    pub agent_ids: Option<Vec<String>>,
    /// An admin of the whole tenant (keys, scopes, policy, webhooks, usage).
    pub tenant_admin: bool,
    /// The global admin (every tenant, runtime configuration, metrics).
    pub global_admin: bool,
}

/// Who the credentials are
#[utoipa::path(
    get,
    path = "/me",
    tag = "admin",
    responses(
        (status = 200, description = "The caller's tenant, role and reach", body = MeResponse),
        (status = 401, description = "No valid credentials", body = ErrorBody),
    )
)]
pub async fn get_me(RequestCaller(caller): RequestCaller) -> AppJson<MeResponse> {
    AppJson(MeResponse {
        tenant_admin: caller.is_tenant_admin(),
        tenant: caller.tenant,
        principal_id: caller.principal_id,
        role: caller.role,
        user_ids: caller.grant.user_ids,
        agent_ids: caller.grant.agent_ids,
        global_admin: caller.global_admin,
    })
}
