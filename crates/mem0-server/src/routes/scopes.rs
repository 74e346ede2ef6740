//! Scope ids that own memories (`GET /entities`: Mem0 calls users, agents and runs "entities";
//! in the core "entities" are the named things a memory mentions) and deleting one of them with
//! its memories.

use axum::extract::State;
use chrono::{DateTime, Utc};
use mem0_core::memory::DEFAULT_PAGE_SIZE;
use mem0_core::store::{ScopeKind, ScopeSummary};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::memories::DeleteAllResponse;
use super::ScopeKindName;
use crate::error::{ApiError, AppJson, AppPath, AppQuery, ErrorBody, ErrorCode};
use crate::state::{AppState, RequestCaller};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_entities)).routes(routes!(delete_entity))
}

/// Query of `GET /entities`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EntitiesQuery {
    /// `user`, `agent` or `run` (all three when left out).
    #[serde(rename = "type")]
    #[param(value_type = Option<ScopeKindName>, inline)]
    pub kind: Option<String>,
    /// The `next` token of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A scope id owning memories.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EntityResponse {
    /// The id.
    pub id: String,
    /// `user`, `agent` or `run`.
    #[serde(rename = "type")]
    #[schema(value_type = ScopeKindName)]
    pub kind: String,
    /// Memories carrying it, expired included.
    pub total_memories: u64,
    /// Oldest memory's creation.
    pub created_at: DateTime<Utc>,
    /// Newest change.
    pub updated_at: DateTime<Utc>,
}

impl From<ScopeSummary> for EntityResponse {
    fn from(summary: ScopeSummary) -> Self {
        Self {
            id: summary.id,
            kind: summary.kind.as_str().to_owned(),
            total_memories: summary.total_memories,
            created_at: summary.created_at,
            updated_at: summary.updated_at,
        }
    }
}

/// One page of scope ids.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EntitiesResponse {
    /// By type (`agent`, `run`, `user`), then id.
    pub results: Vec<EntityResponse>,
    /// Token for the next page, `null` on the last.
    pub next: Option<String>,
}

fn parse_kind(raw: &str) -> Result<ScopeKind, ApiError> {
    ScopeKind::parse(raw).ok_or_else(|| ApiError::validation("type", "must be user, agent or run"))
}

/// List the users, agents and runs that own memories, with counts (admin)
#[utoipa::path(
    get,
    path = "/entities",
    tag = "admin",
    params(EntitiesQuery),
    responses(
        (status = 200, description = "One page", body = EntitiesResponse),
        (status = 400, description = "Invalid type, cursor or limit", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list_entities(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(query): AppQuery<EntitiesQuery>,
) -> Result<AppJson<EntitiesResponse>, ApiError> {
    let kind = query.kind.as_deref().map(parse_kind).transpose()?;
    let page = state.memory().scopes(&caller, kind, query.cursor, query.limit.unwrap_or(DEFAULT_PAGE_SIZE)).await?;
    Ok(AppJson(EntitiesResponse {
        results: page.items.into_iter().map(EntityResponse::from).collect(),
        next: page.next,
    }))
}

/// Delete a user, agent or run: every memory carrying that id (admin)
#[utoipa::path(
    delete,
    path = "/entities/{entity_type}/{entity_id}",
    tag = "admin",
    params(
        ("entity_type" = ScopeKindName, Path, description = "`user`, `agent` or `run`"),
        ("entity_id" = String, Path, description = "The id"),
    ),
    responses(
        (status = 200, description = "Deleted", body = DeleteAllResponse),
        (status = 400, description = "Invalid type or id", body = ErrorBody),
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn delete_entity(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath((entity_type, entity_id)): AppPath<(String, String)>,
) -> Result<AppJson<DeleteAllResponse>, ApiError> {
    let kind = parse_kind(&entity_type)
        .map_err(|_| ApiError::new(ErrorCode::ValidationFailed, "invalid entity_type: must be user, agent or run"))?;
    let id = Some(entity_id.as_str());
    let scope = match kind {
        ScopeKind::User => mem0_core::Scope::new(id, None, None),
        ScopeKind::Agent => mem0_core::Scope::new(None, id, None),
        ScopeKind::Run => mem0_core::Scope::new(None, None, id),
    }?;
    let deleted = state.memory().delete_all(&caller, scope).await?;
    Ok(AppJson(DeleteAllResponse { message: "Entity deleted".to_owned(), deleted }))
}
