//! Route table and the response shapes shared by several routes.

pub mod admin;
pub mod api_keys;
pub mod audit;
pub mod configure;
pub mod health;
pub mod me;
pub mod memories;
pub mod policy;
pub mod requests;
pub mod scopes;
pub mod search;
pub mod transfer;
pub mod usage;

use mem0_core::Scope;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;

use crate::error::ApiError;
use crate::rate_limit::RouteClass;
use crate::state::AppState;

/// An RFC 3339 time given as `field` (surrounding spaces ignored), in UTC.
///
/// # Errors
/// 400 naming `field`, with an example.
pub(crate) fn parse_rfc3339(field: &str, raw: &str) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    chrono::DateTime::parse_from_rfc3339(raw.trim())
        .map(|time| time.with_timezone(&chrono::Utc))
        .map_err(|_| ApiError::validation(field, "expected an RFC 3339 time, e.g. 2026-12-01T00:00:00Z"))
}

/// The documented router of every route (for the OpenAPI document).
pub fn router() -> OpenApiRouter<AppState> {
    let mut all = open_router().merge(crate::metrics::router());
    for (_, group) in api_groups().into_iter().chain(streamed_groups()) {
        all = all.merge(group);
    }
    all
}

/// Routes that read their request body as it arrives (not buffered by the body layer), with
/// `server.import_timeout_secs` as their time limit, by rate-limit class.
pub fn streamed_groups() -> Vec<(RouteClass, OpenApiRouter<AppState>)> {
    vec![(RouteClass::Admin, transfer::streamed_routes())]
}

/// The routes that need credentials, by rate-limit class: the class is where a route is
/// registered, so a new route cannot be left out of (or put into the wrong) class silently.
pub fn api_groups() -> Vec<(RouteClass, OpenApiRouter<AppState>)> {
    vec![
        (
            RouteClass::Read,
            memories::read_routes()
                .merge(me::router())
                .merge(search::read_routes())
                .merge(crate::jobs::read_routes())
                .merge(transfer::read_routes()),
        ),
        (RouteClass::Write, memories::write_routes()),
        (
            RouteClass::Admin,
            memories::admin_routes()
                .merge(admin::router())
                .merge(api_keys::router())
                .merge(configure::router())
                .merge(scopes::router())
                .merge(requests::router())
                .merge(audit::router())
                .merge(policy::router())
                .merge(crate::webhooks::router())
                .merge(usage::router()),
        ),
    ]
}

/// Liveness and readiness: open (no credentials; limited per client address), and never waiting
/// for a concurrency slot.
pub fn open_router() -> OpenApiRouter<AppState> {
    health::router()
}

/// The scope ids a request names, in its query or (flattened) at the top level of its body. Adds,
/// searches and scope-wide deletes need at least one; a listing without any covers the caller's
/// whole tenant (admin only).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScopeIds {
    /// Owning user.
    #[serde(default, deserialize_with = "user_id")]
    #[schema(example = "alice")]
    pub user_id: Option<String>,
    /// Owning agent.
    #[serde(default, deserialize_with = "agent_id")]
    pub agent_id: Option<String>,
    /// Owning run (a session or conversation).
    #[serde(default, deserialize_with = "run_id")]
    pub run_id: Option<String>,
}

// Flattened into a body, the ids are read from a buffer where serde_path_to_error cannot see
// them; naming the field in the message keeps `details.field` precise (see `error_field`).
fn scope_id<'de, D: Deserializer<'de>>(deserializer: D, field: &str) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(deserializer)
        .map_err(|error| D::Error::custom(format_args!("field `{field}`: {error}")))
}

fn user_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    scope_id(deserializer, "user_id")
}

fn agent_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    scope_id(deserializer, "agent_id")
}

fn run_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    scope_id(deserializer, "run_id")
}

impl ScopeIds {
    /// The scope these ids name; blank or over-long ids are a 400.
    pub fn scope(&self) -> Result<Scope, ApiError> {
        Ok(Scope::optional(self.user_id.as_deref(), self.agent_id.as_deref(), self.run_id.as_deref())?)
    }
}

/// `role` of a message (schema only; the core validates).
#[derive(Debug, Clone, Copy, ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum MessageRole {
    /// Said by the user.
    User,
    /// Said by the assistant.
    Assistant,
    /// Instructions; not stored verbatim.
    System,
}

/// A kind of scope id (schema only).
#[derive(Debug, Clone, Copy, ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ScopeKindName {
    /// `user_id`.
    User,
    /// `agent_id`.
    Agent,
    /// `run_id`.
    Run,
}

/// When a conversation happened (schema only): RFC 3339 text or Unix seconds.
#[derive(Debug, Clone, serde::Deserialize, ToSchema)]
#[allow(dead_code)]
#[serde(untagged)]
pub enum TimestampInput {
    /// RFC 3339, e.g. `2024-05-01T10:00:00Z`.
    #[schema(format = DateTime)]
    Text(String),
    /// Seconds since 1970-01-01 UTC.
    Seconds(f64),
}

/// A confirmation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageResponse {
    /// What happened.
    pub message: String,
}

/// Whose entries an admin may read in the request log and the audit trail: everyone's of its
/// tenant (`None`) for a tenant or global admin; for an admin bound to some users or agents, its
/// own and those of the keys it manages, never the whole tenant's.
pub(crate) async fn visible_principals(
    state: &AppState,
    caller: &mem0_core::Caller,
) -> Result<Option<Vec<String>>, crate::error::ApiError> {
    if caller.global_admin || caller.is_tenant_admin() {
        return Ok(None);
    }
    let managed = state.api_keys.list(caller).await?;
    let mut principals: Vec<String> = managed.iter().map(|info| format!("key:{}", info.id)).collect();
    principals.push(caller.principal_id.clone());
    Ok(Some(principals))
}
