//! `POST /search`: semantic search within a scope.

use axum::extract::State;
use mem0_core::filter::parse_filters;
use mem0_core::memory::{SearchMode, SearchRequest as CoreSearchRequest, DEFAULT_THRESHOLD, DEFAULT_TOP_K};
use mem0_core::temporal::TemporalIntent;
use mem0_core::Scope;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::ScopeIds;
use crate::error::{ApiError, AppJson, ErrorBody};
use crate::state::{AppState, RequestCaller};
use mem0_core::MemoryItem;

/// Search is a read.
pub(super) fn read_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(search_memories))
}

/// Body of `POST /search`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[schema(example = json!({"query": "what food should the user avoid?", "filters": {"user_id": "alice"}, "top_k": 5}))]
pub struct SearchRequest {
    /// What to look for.
    #[schema(example = "what food should the user avoid?")]
    pub query: String,
    /// Scope ids (`user_id`, `agent_id`, `run_id`; at least one, here or at the top level) and
    /// conditions: `{"key": value}`, `{"key": {"eq|ne|gt|gte|lt|lte|in|nin|contains|icontains": v}}`,
    /// `{"key": "*"}` and `AND`/`OR`/`NOT` lists, nested to any depth.
    #[serde(default)]
    #[schema(value_type = Option<Object>, example = json!({"user_id": "alice", "AND": [{"topic": "food"}, {"priority": {"gte": 2}}]}))]
    pub filters: Option<serde_json::Value>,
    /// Scope ids at the top level (older clients send them here); each overrides the same key
    /// in `filters`.
    #[serde(flatten)]
    pub scope: ScopeIds,
    /// Most results, 1 to 1000 (default 20).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    pub top_k: Option<usize>,
    /// Relevance floor, 0 to 1 (default 0.1): results whose score and semantic similarity are
    /// both below it are dropped, so every mode returns what `dense` mode returns at the same
    /// threshold. Scores are in [0, 1] and comparable across queries: in `hybrid` mode the
    /// weighted sum of semantic similarity, normalised BM25 and entity match (weights add up to
    /// 1; a result kept for its meaning alone can score below the threshold); in `dense` mode the
    /// cosine similarity; in `keyword` mode the normalised BM25 (1 = every query term present in
    /// an average-length memory).
    #[serde(default)]
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub threshold: Option<f32>,
    /// Include expired memories (default false).
    #[serde(default)]
    pub show_expired: Option<bool>,
    /// Include memories a newer one of their state key superseded, and retired ones (default
    /// false): the whole chain, each with `status`, `superseded_by` and `valid_to`.
    #[serde(default)]
    pub include_superseded: Option<bool>,
    /// Read time in the query (default true): a range ("last year", "in May", "3 weeks ago",
    /// "去年", "上个月") keeps memories true at some moment in it, superseded values included (if
    /// none is, the search runs without it and says so in `warnings`); "currently"/"现在" or "the
    /// first time"/"第一次" weigh results by age (×0.9–1.1, `explain.time_factor`).
    #[serde(default)]
    pub temporal: Option<bool>,
    /// The time relative expressions are read against (RFC 3339; default now), e.g. the date of the
    /// conversation a question comes from.
    #[serde(default)]
    #[schema(format = DateTime, example = "2026-12-01T10:00:00Z")]
    pub reference_time: Option<String>,
    /// Decay by use: multiply each score by 0.3 (not read for long) to 1.5 (read just now), from
    /// the memory's last read by id or as a search hit (`explain.decay_factor`). Default: on for
    /// the tenants in `memory.decay.tenants`, off otherwise.
    #[serde(default)]
    pub decay: Option<bool>,
    /// Retrievers to use (default `hybrid`).
    #[serde(default)]
    pub mode: Option<SearchModeInput>,
    /// Return each result's score components (`explain`).
    #[serde(default)]
    pub explain: Option<bool>,
    /// Reorder the best candidates with the configured reranker (`memory.reranker`); results
    /// then carry `rerank_score` and are ordered by it. If the reranker fails, the fused order is
    /// kept and `warnings` says so.
    #[serde(default)]
    pub rerank: Option<bool>,
}

/// Which retrievers produce candidates.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchModeInput {
    /// Dense ∪ BM25 ∪ entity-linked candidates, fused.
    Hybrid,
    /// Embedding similarity only.
    Dense,
    /// BM25 only (no embedding call).
    Keyword,
}

impl From<SearchModeInput> for SearchMode {
    fn from(mode: SearchModeInput) -> Self {
        match mode {
            SearchModeInput::Hybrid => Self::Hybrid,
            SearchModeInput::Dense => Self::Dense,
            SearchModeInput::Keyword => Self::Keyword,
        }
    }
}

/// Results of a search.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchResponse {
    /// Best first, each with its `score` (and `explain` when asked).
    pub results: Vec<MemoryItem>,
    /// Things to know although the search succeeded (e.g. a reranker that failed and was skipped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What the query said about time ("last year", "in May", "currently", "the first time",
    /// "去年", "现在"…) and how it was applied; absent when it said nothing or `temporal` is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temporal: Option<TemporalIntent>,
}

/// Search the memories of a scope: hybrid (embeddings, BM25, entities), dense or keyword
#[utoipa::path(
    post,
    path = "/search",
    tag = "search",
    request_body = SearchRequest,
    responses(
        (status = 401, description = "No valid credentials", body = ErrorBody),
        (status = 403, description = "Outside the caller's scopes, or its role does not allow it", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
        (status = 200, description = "Results, best first", body = SearchResponse),
        (status = 400, description = "Invalid query, scope, filter, top_k or threshold", body = ErrorBody),
        (status = 502, description = "Embedding provider failed", body = ErrorBody),
        (status = 503, description = "Store or provider unavailable", body = ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn search_memories(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppJson(body): AppJson<SearchRequest>,
) -> Result<AppJson<SearchResponse>, ApiError> {
    search(&state, &caller, body).await.map(AppJson)
}

/// What `POST /search` does, for the routes that speak Mem0's dialect too.
pub(crate) async fn search(
    state: &AppState,
    caller: &mem0_core::Caller,
    body: SearchRequest,
) -> Result<SearchResponse, ApiError> {
    let (filter_scope, filter) = match &body.filters {
        Some(value) => parse_filters(value)?,
        None => Default::default(),
    };
    let scope = Scope::optional(
        body.scope.user_id.as_deref().or(filter_scope.user_id.as_deref()),
        body.scope.agent_id.as_deref().or(filter_scope.agent_id.as_deref()),
        body.scope.run_id.as_deref().or(filter_scope.run_id.as_deref()),
    )?;
    let reference_time =
        body.reference_time.as_deref().map(|raw| super::parse_rfc3339("reference_time", raw)).transpose()?;
    let request = CoreSearchRequest {
        scope,
        filter,
        query: body.query,
        top_k: body.top_k.unwrap_or(DEFAULT_TOP_K),
        threshold: body.threshold.unwrap_or(DEFAULT_THRESHOLD),
        show_expired: body.show_expired.unwrap_or(false),
        include_superseded: body.include_superseded.unwrap_or(false),
        temporal: body.temporal.unwrap_or(true),
        reference_time,
        decay: body.decay,
        mode: body.mode.map(SearchMode::from).unwrap_or_default(),
        explain: body.explain.unwrap_or(false),
        rerank: body.rerank.unwrap_or(false),
    };
    let outcome = state.memory().search(caller, request).await?;
    Ok(SearchResponse { results: outcome.results, warnings: outcome.warnings, temporal: outcome.temporal })
}
