//! `/memories` routes: add, list, get, update, delete, delete a scope, history.

use axum::extract::State;
use chrono::{DateTime, NaiveDate, Utc};
use mem0_core::filter::parse_filter;
use mem0_core::memory::{AddRequest, ListRequest, SourceInput, UpdateRequest, DEFAULT_PAGE_SIZE};
use mem0_core::types::{MemoryStatus, SourceType};
use mem0_core::{AddedMemory, HistoryRecord, MemoryItem, Message};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{MessageResponse, MessageRole, ScopeIds, TimestampInput};
use crate::error::{parse_memory_id, ApiError, AppJson, AppPath, AppQuery, ErrorBody};
use crate::state::{AppState, RequestCaller};

/// Reading memories.
pub(super) fn read_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_memories)).routes(routes!(get_memory)).routes(routes!(memory_history))
}

/// Changing memories.
pub(super) fn write_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(add_memories)).routes(routes!(update_memory, delete_memory))
}

/// Deleting a whole scope.
pub(super) fn admin_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(delete_all_memories))
}

/// Text of a message: a string, or a list of content parts of which the text parts are used.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// OpenAI-style content parts; `{"type": "text", "text": ...}` parts are joined with spaces.
    Parts(Vec<ContentPart>),
}

/// One content part.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ContentPart {
    /// Part type; only `text` parts are used.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

/// One conversation message.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MessageInput {
    /// `user`, `assistant` or `system`.
    #[schema(value_type = MessageRole, example = "user")]
    pub role: String,
    /// The message text; messages with null content are skipped.
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Speaker name; stored as `actor_id`.
    #[serde(default)]
    pub name: Option<String>,
}

/// Body of `POST /memories`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "messages": [{"role": "user", "content": "I am allergic to peanuts"}],
    "user_id": "alice",
    "metadata": {"topic": "health"},
    "infer": false
}))]
pub struct AddMemoriesRequest {
    /// The conversation (1 to 100 messages).
    #[schema(min_items = 1, max_items = 100)]
    pub messages: Vec<MessageInput>,
    /// Who the memories belong to (at least one of user_id, agent_id, run_id).
    #[serde(flatten)]
    pub scope: ScopeIds,
    /// Caller metadata stored with each memory; scope and reserved keys are dropped.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Last day the memories are visible (YYYY-MM-DD).
    #[serde(default)]
    #[schema(format = Date)]
    pub expiration_date: Option<String>,
    /// Extract facts with the LLM (default true) or store every non-system message verbatim (false).
    #[serde(default)]
    pub infer: Option<bool>,
    /// `procedural_memory` (needs agent_id and an LLM).
    #[serde(default)]
    pub memory_type: Option<String>,
    /// Extraction instructions for this call.
    #[serde(default)]
    pub prompt: Option<String>,
    /// When the conversation happened: RFC 3339 or Unix seconds; defaults to now.
    #[serde(default)]
    #[schema(value_type = Option<TimestampInput>, example = "2024-05-01T10:00:00Z")]
    pub timestamp: Option<serde_json::Value>,
    /// Provenance: what kind of source said it. Default: a verbatim message by its role
    /// (`user_stated`, `assistant_stated`), extracted facts and summaries `agent_inferred`.
    #[serde(default)]
    pub source_type: Option<SourceType>,
    /// Provenance: who said it (a person, agent or tool name; at most 256 bytes). Default: the
    /// message's `name`.
    #[serde(default)]
    #[schema(example = "weather-api")]
    pub source_actor: Option<String>,
    /// Provenance: a reference to the evidence (message, document or ticket id; at most 256
    /// bytes). Default for extracted facts: `messages:<batch id>` of their buffered messages.
    #[serde(default)]
    #[schema(example = "ticket:4711")]
    pub evidence_ref: Option<String>,
    /// Provenance: how sure, 0 to 1. Default: the model's (extraction), else by source type
    /// (`human_reviewed` 1.0, `user_stated` 0.9, `tool_result` 0.85, `imported` 0.8, others 0.7).
    #[serde(default)]
    #[schema(minimum = 0.0, maximum = 1.0, example = 0.95)]
    pub confidence: Option<f32>,
    /// The attribute the new memories are values of (`user.home_city`; letters, digits and
    /// `_ . - :`, at most 128 bytes): a newer memory with the same key and scope supersedes them
    /// (see `status`). With `infer=true` the model proposes keys when none is given.
    #[serde(default)]
    #[schema(example = "user.home_city")]
    pub state_key: Option<String>,
    /// When what the messages say took effect (RFC 3339 or Unix seconds; may be in the future):
    /// orders memories of one state key. Default: `timestamp`, the observation time.
    #[serde(default)]
    #[schema(value_type = Option<TimestampInput>, example = "2026-03-01T00:00:00Z")]
    pub event_time: Option<serde_json::Value>,
    /// Queue the add and answer 202 with a job at once (also `Prefer: respond-async`); follow it
    /// at `GET /jobs/{job_id}`. Adds of one scope run one at a time, in order of arrival.
    #[serde(default, skip_serializing)]
    pub async_mode: Option<bool>,
}

/// Response of `POST /memories`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AddMemoriesResponse {
    /// The memories created.
    pub results: Vec<AddedMemory>,
    /// Things to know although the call succeeded, e.g. that the model's reply could not be read
    /// and nothing was stored (absent when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Query of `GET /memories`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListMemoriesQuery {
    /// Rows per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub page_size: Option<usize>,
    /// Alias of page_size, for Mem0 clients.
    #[param(minimum = 1, maximum = 1000)]
    pub top_k: Option<usize>,
    /// The `next` token of the previous page.
    pub cursor: Option<String>,
    /// Include expired memories (default false).
    pub show_expired: Option<bool>,
    /// Include memories a newer one of their state key superseded, and retired ones (default
    /// false).
    pub include_superseded: Option<bool>,
    /// A filter object (JSON-encoded), as in search.
    pub filters: Option<String>,
}

/// One page of memories.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ListMemoriesResponse {
    /// Memories, newest first (ties by id).
    pub results: Vec<MemoryItem>,
    /// Token for the next page (`cursor`), `null` on the last page.
    pub next: Option<String>,
}

/// Response of `DELETE /memories`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeleteAllResponse {
    /// What happened.
    pub message: String,
    /// How many memories were deleted.
    pub deleted: usize,
}

/// Body of `PUT /memories/{memory_id}`; at least one field.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[schema(min_properties = 1, example = json!({"text": "I am allergic to peanuts and tree nuts"}))]
pub struct UpdateMemoryRequest {
    /// New text (re-embedded).
    #[serde(default)]
    pub text: Option<String>,
    /// Keys merged into the metadata.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// New expiration date (YYYY-MM-DD), or `null` to clear it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, format = Date)]
    pub expiration_date: Option<Option<String>>,
    /// Provenance: a new source type (`human_reviewed` once a person checked it); without
    /// `confidence` the memory gets that type's default. Any provenance change makes the
    /// caller's credential the memory's `source_app`.
    #[serde(default)]
    pub source_type: Option<SourceType>,
    /// Provenance: who said it (at most 256 bytes).
    #[serde(default)]
    pub source_actor: Option<String>,
    /// Provenance: a reference to the evidence (at most 256 bytes).
    #[serde(default)]
    pub evidence_ref: Option<String>,
    /// Provenance: how sure, 0 to 1.
    #[serde(default)]
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub confidence: Option<f32>,
    /// The state key, or `null` to take the memory out of its chain.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, example = "user.home_city")]
    pub state_key: Option<Option<String>>,
    /// `pinned` (current whatever arrives later), `retired` (no longer true; hidden), or
    /// `active` (back to the resolver: current unless a newer memory of its key exists).
    #[serde(default)]
    pub status: Option<MemoryStatus>,
    /// When what it says took effect (RFC 3339), or `null` to order it by `created_at`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub event_time: Option<Option<String>>,
}

/// Response of `PUT /memories/{memory_id}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UpdateMemoryResponse {
    /// What happened.
    pub message: String,
    /// The memory after the change.
    pub result: MemoryItem,
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// A day: `YYYY-MM-DD`, or the UTC day of an RFC 3339 time.
pub(crate) fn parse_date(field: &str, raw: &str) -> Result<NaiveDate, ApiError> {
    let raw = raw.trim();
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .or_else(|_| DateTime::parse_from_rfc3339(raw).map(|time| time.with_timezone(&Utc).date_naive()))
        .map_err(|_| ApiError::validation(field, "expected a date in YYYY-MM-DD format"))
}

fn parse_timestamp(value: &serde_json::Value) -> Result<DateTime<Utc>, ApiError> {
    let time = parse_time("timestamp", value)?;
    if time > Utc::now() + chrono::Duration::days(1) {
        return Err(ApiError::validation("timestamp", "cannot be in the future"));
    }
    Ok(time)
}

/// RFC 3339 or Unix seconds.
fn parse_time(field: &str, value: &serde_json::Value) -> Result<DateTime<Utc>, ApiError> {
    let parsed = match value {
        serde_json::Value::Number(number) => {
            number.as_f64().and_then(|seconds| DateTime::from_timestamp_micros((seconds * 1_000_000.0) as i64))
        }
        serde_json::Value::String(text) => super::parse_rfc3339(field, text).ok(),
        _ => None,
    };
    parsed.ok_or_else(|| ApiError::validation(field, "expected RFC 3339 or Unix seconds"))
}

fn message_text(content: MessageContent) -> String {
    match content {
        MessageContent::Text(text) => text,
        MessageContent::Parts(parts) => parts
            .into_iter()
            .filter(|part| part.kind == "text")
            .filter_map(|part| part.text)
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// Add memories from a conversation
///
/// With `infer=false` every non-system message is stored verbatim; with `infer=true` (the default)
/// one LLM call extracts self-contained facts (needs an LLM to be configured); with
/// `memory_type=procedural_memory` and an `agent_id` the conversation becomes one procedural
/// summary. All or nothing: on any error nothing is stored.
#[utoipa::path(
    post,
    path = "/memories",
    tag = "memories",
    request_body = AddMemoriesRequest,
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Outside the caller's scopes, or its role does not allow it", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "Memories created", body = AddMemoriesResponse),
        (status = 202, description = "Queued (`async_mode` or `Prefer: respond-async`); follow it at `GET /jobs/{job_id}`", body = crate::jobs::JobAccepted),
        (status = 400, description = "Invalid input or no LLM configured for infer=true", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 502, description = "Embedding or LLM provider failed (provider_* codes)", body = ErrorBody),
        (status = 503, description = "Store or provider unavailable", body = ErrorBody),
        (status = 504, description = "Provider or request timed out", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn add_memories(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    headers: axum::http::HeaderMap,
    AppJson(body): AppJson<AddMemoriesRequest>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse as _;
    if body.async_mode.unwrap_or(false) || prefers_async(&headers) {
        let accepted = crate::jobs::enqueue(&state, &caller, body).await?;
        return Ok((axum::http::StatusCode::ACCEPTED, AppJson(accepted)).into_response());
    }
    Ok(AppJson(add(&state, &caller, body).await?).into_response())
}

/// `Prefer: respond-async` (RFC 7240), among other preferences.
fn prefers_async(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.split(',').any(|preference| preference.trim().eq_ignore_ascii_case("respond-async")))
}

/// What `POST /memories` does, for the routes that speak Mem0's dialect too.
pub(crate) async fn add(
    state: &AppState,
    caller: &mem0_core::Caller,
    body: AddMemoriesRequest,
) -> Result<AddMemoriesResponse, ApiError> {
    let request = core_add_request(body)?;
    let outcome = state.memory().add(caller, request).await?;
    Ok(AddMemoriesResponse { results: outcome.results, warnings: outcome.warnings })
}

/// The core's request for an add body (its dates and times read, its messages' texts joined).
pub(crate) fn core_add_request(body: AddMemoriesRequest) -> Result<AddRequest, ApiError> {
    let scope = body.scope.scope()?;
    let expiration_date = body.expiration_date.as_deref().map(|raw| parse_date("expiration_date", raw)).transpose()?;
    let timestamp = body.timestamp.as_ref().map(parse_timestamp).transpose()?;
    let event_time = body.event_time.as_ref().map(|value| parse_time("event_time", value)).transpose()?;
    let messages = body
        .messages
        .into_iter()
        .filter_map(|message| {
            message.content.map(|content| Message {
                role: message.role,
                content: message_text(content),
                name: message.name,
            })
        })
        .collect();
    let request = AddRequest {
        scope,
        messages,
        metadata: body.metadata.unwrap_or_default(),
        expiration_date,
        infer: body.infer.unwrap_or(true),
        memory_type: body.memory_type,
        prompt: body.prompt,
        timestamp,
        source: SourceInput {
            source_type: body.source_type,
            source_actor: body.source_actor,
            evidence_ref: body.evidence_ref,
            confidence: body.confidence,
        },
        state_key: body.state_key,
        event_time,
        ids_from: None,
    };
    Ok(request)
}

/// List memories of a scope, newest first, paginated
///
/// Without user_id, agent_id or run_id this lists the whole tenant (admin only).
#[utoipa::path(
    get,
    path = "/memories",
    tag = "memories",
    params(ScopeIds, ListMemoriesQuery),
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Outside the caller's scopes, or its role does not allow it", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "One page", body = ListMemoriesResponse),
        (status = 400, description = "Invalid query, filter or cursor", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list_memories(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(ids): AppQuery<ScopeIds>,
    AppQuery(query): AppQuery<ListMemoriesQuery>,
) -> Result<AppJson<ListMemoriesResponse>, ApiError> {
    let scope = ids.scope()?;
    let filter = match query.filters.as_deref() {
        Some(raw) => {
            let value: serde_json::Value = serde_json::from_str(raw)
                .map_err(|error| ApiError::validation("filters", format!("not valid JSON: {error}")))?;
            Some(parse_filter(&value)?)
        }
        None => None,
    };
    let page = state
        .memory()
        .list(
            &caller,
            ListRequest {
                scope,
                filter,
                page_size: query.page_size.or(query.top_k).unwrap_or(DEFAULT_PAGE_SIZE),
                cursor: query.cursor,
                show_expired: query.show_expired.unwrap_or(false),
                include_superseded: query.include_superseded.unwrap_or(false),
            },
        )
        .await?;
    Ok(AppJson(ListMemoriesResponse { results: page.items, next: page.next }))
}

/// Delete every memory of a scope
///
/// Deletes exactly the memories whose ids match every id given; other scopes are untouched.
#[utoipa::path(
    delete,
    path = "/memories",
    tag = "memories",
    params(ScopeIds),
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Outside the caller's scopes, or its role does not allow it", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "Deleted", body = DeleteAllResponse),
        (status = 400, description = "No scope id given, or an invalid one", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn delete_all_memories(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(ids): AppQuery<ScopeIds>,
) -> Result<AppJson<DeleteAllResponse>, ApiError> {
    let scope = ids.scope()?;
    let deleted = state.memory().delete_all(&caller, scope).await?;
    Ok(AppJson(DeleteAllResponse { message: "All relevant memories deleted".to_owned(), deleted }))
}

/// Get one memory
#[utoipa::path(
    get,
    path = "/memories/{memory_id}",
    tag = "memories",
    params(("memory_id" = Uuid, Path, description = "Memory id")),
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Outside the caller's scopes, or its role does not allow it", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "The memory", body = MemoryItem),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such memory", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn get_memory(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(memory_id): AppPath<String>,
) -> Result<AppJson<MemoryItem>, ApiError> {
    let id = parse_memory_id(&memory_id)?;
    Ok(AppJson(state.memory().get(&caller, id).await?))
}

/// Update a memory's text, metadata (merged) or expiration
#[utoipa::path(
    put,
    path = "/memories/{memory_id}",
    tag = "memories",
    params(("memory_id" = Uuid, Path, description = "Memory id")),
    request_body = UpdateMemoryRequest,
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Outside the caller's scopes, or its role does not allow it", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "Updated", body = UpdateMemoryResponse),
        (status = 400, description = "Invalid input or malformed id", body = ErrorBody),
        (status = 404, description = "No such memory", body = ErrorBody),
        (status = 502, description = "Embedding or LLM provider failed (provider_* codes)", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn update_memory(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(memory_id): AppPath<String>,
    AppJson(body): AppJson<UpdateMemoryRequest>,
) -> Result<AppJson<UpdateMemoryResponse>, ApiError> {
    let id = parse_memory_id(&memory_id)?;
    let updated = update(&state, &caller, id, body).await?;
    Ok(AppJson(UpdateMemoryResponse { message: "Memory updated successfully!".to_owned(), result: updated }))
}

/// What `PUT /memories/{memory_id}` does, for the routes that speak Mem0's dialect too.
pub(crate) async fn update(
    state: &AppState,
    caller: &mem0_core::Caller,
    id: uuid::Uuid,
    body: UpdateMemoryRequest,
) -> Result<MemoryItem, ApiError> {
    let expiration_date = match body.expiration_date {
        None => None,
        Some(None) => Some(None),
        Some(Some(raw)) => Some(Some(parse_date("expiration_date", &raw)?)),
    };
    let source = SourceInput {
        source_type: body.source_type,
        source_actor: body.source_actor,
        evidence_ref: body.evidence_ref,
        confidence: body.confidence,
    };
    let event_time = match body.event_time {
        None => None,
        Some(None) => Some(None),
        Some(Some(raw)) => Some(Some(parse_time("event_time", &serde_json::Value::String(raw))?)),
    };
    let request = UpdateRequest {
        text: body.text,
        metadata: body.metadata,
        expiration_date,
        source,
        state_key: body.state_key,
        status: body.status,
        event_time,
    };
    Ok(state.memory().update(caller, id, request).await?)
}

/// Delete one memory
#[utoipa::path(
    delete,
    path = "/memories/{memory_id}",
    tag = "memories",
    params(("memory_id" = Uuid, Path, description = "Memory id")),
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Outside the caller's scopes, or its role does not allow it", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "Deleted", body = MessageResponse),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such memory", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn delete_memory(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(memory_id): AppPath<String>,
) -> Result<AppJson<MessageResponse>, ApiError> {
    let id = parse_memory_id(&memory_id)?;
    state.memory().delete(&caller, id).await?;
    Ok(AppJson(MessageResponse { message: "Memory deleted successfully".to_owned() }))
}

/// History of a memory, oldest first
///
/// Still available after the memory is deleted.
#[utoipa::path(
    get,
    path = "/memories/{memory_id}/history",
    tag = "memories",
    params(("memory_id" = Uuid, Path, description = "Memory id")),
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Outside the caller's scopes, or its role does not allow it", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "Changes, oldest first", body = Vec<HistoryRecord>),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such memory", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn memory_history(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(memory_id): AppPath<String>,
) -> Result<AppJson<Vec<HistoryRecord>>, ApiError> {
    let id = parse_memory_id(&memory_id)?;
    let entries = state.memory().history(&caller, id).await?;
    Ok(AppJson(entries))
}
