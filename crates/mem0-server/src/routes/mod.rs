//! Route table and the response shapes shared by several routes.

pub mod admin;
pub mod api_keys;
pub mod configure;
pub mod health;
pub mod memories;
pub mod requests;
pub mod scopes;
pub mod search;

use chrono::{DateTime, NaiveDate, Utc};
use mem0_core::{HistoryRecord, MemoryItem};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use uuid::Uuid;

use crate::state::AppState;

/// Builds the documented router of every route.
pub fn router() -> OpenApiRouter<AppState> {
    api_router().merge(open_router())
}

/// The routes that need credentials (and count against the concurrency limit).
pub fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(memories::router())
        .merge(search::router())
        .merge(admin::router())
        .merge(api_keys::router())
        .merge(configure::router())
        .merge(scopes::router())
        .merge(requests::router())
}

/// Liveness and readiness: open, and never waiting for a concurrency slot.
pub fn open_router() -> OpenApiRouter<AppState> {
    health::router()
}

/// A memory as returned by get, list and search.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MemoryResponse {
    /// Memory id.
    pub id: Uuid,
    /// The memory text.
    pub memory: String,
    /// md5 of the text.
    pub hash: String,
    /// Caller metadata (`null` when empty).
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Creation time (RFC 3339).
    pub created_at: DateTime<Utc>,
    /// Last change (RFC 3339).
    pub updated_at: DateTime<Utc>,
    /// Owning user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Owning agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Owning run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Speaker of the source message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    /// Role of the source message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// `user` or `assistant`, for extracted facts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attributed_to: Option<String>,
    /// Last day the memory is visible (YYYY-MM-DD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_date: Option<NaiveDate>,
    /// `procedural_memory` for procedural summaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<String>,
    /// Existing memories the extraction linked this fact to (related, updated or corrected).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub linked_memory_ids: Vec<Uuid>,
    /// Named things the fact mentions (people, places, products…).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entities: Vec<String>,
    /// Score in [0, 1] (search only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// Relevance from the reranker in [0, 1] (search with `rerank: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
    /// Score components (search with `explain: true`): `semantic`, `keyword`, `bm25`, `entity`,
    /// `contributions` (weight × signal; they add up to `score`) and `sources`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub explain: Option<serde_json::Value>,
}

impl From<MemoryItem> for MemoryResponse {
    fn from(item: MemoryItem) -> Self {
        Self {
            id: item.id,
            memory: item.memory,
            hash: item.hash,
            metadata: item.metadata,
            created_at: item.created_at,
            updated_at: item.updated_at,
            user_id: item.user_id,
            agent_id: item.agent_id,
            run_id: item.run_id,
            actor_id: item.actor_id,
            role: item.role,
            attributed_to: item.attributed_to,
            expiration_date: item.expiration_date,
            memory_type: item.memory_type,
            linked_memory_ids: item.linked_memory_ids,
            entities: item.entities,
            score: item.score,
            rerank_score: item.rerank_score,
            explain: item.explain.and_then(|explain| serde_json::to_value(explain).ok()),
        }
    }
}

/// One change to a memory.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HistoryResponse {
    /// Entry id.
    pub id: Uuid,
    /// The memory.
    pub memory_id: Uuid,
    /// Text before (`null` for ADD).
    pub old_memory: Option<String>,
    /// Text after (`null` for DELETE).
    pub new_memory: Option<String>,
    /// `ADD`, `UPDATE` or `DELETE`.
    #[schema(example = "ADD")]
    pub event: String,
    /// When the change happened.
    pub created_at: DateTime<Utc>,
    /// The memory's `updated_at` after the change.
    pub updated_at: Option<DateTime<Utc>>,
    /// True for DELETE.
    pub is_deleted: bool,
    /// Speaker of the source message.
    pub actor_id: Option<String>,
    /// Role of the source message.
    pub role: Option<String>,
}

impl From<HistoryRecord> for HistoryResponse {
    fn from(record: HistoryRecord) -> Self {
        Self {
            id: record.id,
            memory_id: record.memory_id,
            old_memory: record.old_memory,
            new_memory: record.new_memory,
            event: record.event.as_str().to_owned(),
            created_at: record.created_at,
            updated_at: record.updated_at,
            is_deleted: record.is_deleted,
            actor_id: record.actor_id,
            role: record.role,
        }
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

/// What a key may do (schema only).
#[derive(Debug, Clone, Copy, ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum RoleName {
    /// Read memories.
    Read,
    /// Read and write memories of its scopes.
    Write,
    /// Everything in its tenant, including keys and scope-wide deletes.
    Admin,
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
