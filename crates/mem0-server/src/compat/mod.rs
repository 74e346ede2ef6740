//! Mem0's platform API, spoken by its official SDKs (`mem0ai` on PyPI and npm) and the
//! framework integrations built on them: the paths, bodies and response shapes they use, over the
//! same core, credentials (`Authorization: Token <key>`), tenancy, rate-limit classes and limits
//! as our own routes. Every handler translates and calls what our route would call; nothing here
//! stores anything itself. What Mem0 has and this server does not is a 501 naming the feature.
//! The README's "Using Mem0's SDKs" table lists every call and its status.
//!
//! These routes are not in `openapi.json`: their contract is Mem0's, and their clients are
//! Mem0's SDKs.

pub mod shape;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, MethodRouter};
use axum::Router;
use mem0_core::memory::ListRequest;
use mem0_core::store::ScopeKind;
use mem0_core::Caller;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use self::shape::{unsupported, Ids};
use crate::error::{parse_memory_id, ApiError, AppJson, AppPath, AppQuery};
use crate::rate_limit::RouteClass;
use crate::routes::memories::{AddMemoriesRequest, MessageInput, UpdateMemoryRequest};
use crate::routes::search::{SearchModeInput, SearchRequest};
use crate::routes::ScopeIds;
use crate::state::{AppState, RequestCaller};

/// Mem0's search default (ours is 20).
const MEM0_TOP_K: usize = 10;
/// Mem0's page size default.
const MEM0_PAGE_SIZE: usize = 100;
/// Entities listed per page when the caller names no page size: the SDKs' `reset()` deletes
/// what one listing returns, so the default is the largest page.
const ENTITY_PAGE_SIZE: usize = mem0_core::memory::MAX_PAGE_SIZE;
/// Most scope ids `GET /v1/entities/` counts and pages through.
const MAX_ENTITIES: usize = 100_000;

/// The routes of one rate-limit class (see `routes::api_groups`), each with and without its
/// trailing slash (the SDKs send it; curl users often do not).
pub fn routes(class: RouteClass) -> Router<AppState> {
    let table: Vec<(&str, MethodRouter<AppState>)> = match class {
        RouteClass::Read => vec![
            ("/v1/ping", get(ping)),
            ("/v3/memories", post(list_v3)),
            ("/v2/memories", post(list_v3)),
            ("/v1/memories", get(list_v1)),
            ("/v3/memories/search", post(search_v3)),
            ("/v2/memories/search", post(search_legacy)),
            ("/v1/memories/search", post(search_legacy)),
            ("/v1/memories/{memory_id}", get(get_memory)),
            ("/v1/memories/{memory_id}/history", get(history)),
            // What the SDKs can call and this server does not do.
            ("/v1/batch", axum::routing::put(batch).delete(batch)),
            ("/v1/exports", post(exports)),
            ("/v1/exports/get", post(exports)),
            ("/v1/summary", post(summary)),
            ("/v1/feedback", post(feedback)),
            ("/v1/event/{event_id}", get(event)),
            ("/v1/events", get(events)),
            ("/v2/entities/user/{entity_id}/profile", get(profiles)),
            ("/v2/profiles/jobs", post(profiles)),
            ("/v2/profiles/jobs/{job_id}", get(profiles)),
            ("/v2/profiles/settings", get(profiles).post(profiles)),
            ("/api/v1/webhooks/projects/{project_id}", get(webhooks).post(webhooks)),
            ("/api/v1/webhooks/{webhook_id}", axum::routing::put(webhooks).delete(webhooks)),
            ("/api/v1/orgs/organizations/{org_id}/projects/{project_id}", get(projects).patch(projects).post(projects)),
        ],
        RouteClass::Write => vec![
            ("/v3/memories/add", post(add_v3)),
            ("/v1/memories", post(add_v1)),
            ("/v1/memories/{memory_id}", axum::routing::put(update_memory).delete(delete_memory)),
        ],
        RouteClass::Admin => vec![
            ("/v1/memories", delete(delete_all)),
            ("/v1/entities", get(entities)),
            ("/v2/entities/{entity_type}/{entity_id}", delete(delete_entity)),
            ("/v1/entities/{entity_type}/{entity_id}", delete(delete_entity)),
        ],
        RouteClass::Open => Vec::new(),
    };
    let mut router = Router::new();
    for (path, method) in table {
        router = router.route(path, method.clone()).route(&format!("{path}/"), method);
    }
    router
}

/// Gives error bodies a `detail` (the message): where Mem0's Python SDK reads the message of a
/// failed call from. The rest of our envelope stays.
pub async fn error_detail(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if !(response.status().is_client_error() || response.status().is_server_error()) || !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // Our error bodies are small, but a message may quote a long input: read up to 16 MiB (more
    // than any body the server accepts).
    let Ok(bytes) = axum::body::to_bytes(body, 16 * 1024 * 1024).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    if let Some(message) = object.get("message").cloned() {
        object.entry("detail").or_insert(message);
    }
    let body = serde_json::to_vec(&object).unwrap_or_else(|_| bytes.to_vec());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

/// Fields of Mem0's add that this server has no counterpart for; a value other than null,
/// false, "" or an empty list/object is a 501 naming the feature.
const UNSUPPORTED_ADD_FIELDS: [(&str, &str); 8] = [
    ("app_id", "app_id scopes"),
    ("custom_categories", "custom categories"),
    ("agent_custom_instructions", "agent_custom_instructions"),
    ("structured_data_schema", "structured data extraction"),
    ("includes", "includes"),
    ("excludes", "excludes"),
    ("immutable", "immutable memories"),
    ("prompt_profile_id", "prompt profiles"),
];

fn check_unsupported(body: &Map<String, Value>, fields: &[(&str, &str)]) -> Result<(), ApiError> {
    for (field, feature) in fields {
        let set = match body.get(*field) {
            None | Some(Value::Null | Value::Bool(false)) => false,
            Some(Value::String(text)) => !text.is_empty(),
            Some(Value::Array(items)) => !items.is_empty(),
            Some(Value::Object(object)) => !object.is_empty(),
            Some(_) => true,
        };
        if set {
            return Err(unsupported(feature));
        }
    }
    Ok(())
}

/// A body that must be a JSON object.
fn object(body: Value) -> Result<Map<String, Value>, ApiError> {
    match body {
        Value::Object(object) => Ok(object),
        _ => Err(ApiError::validation("body", "must be a JSON object")),
    }
}

/// Deserialises `value` (a part of a body) as `T`, naming `field` in a 400.
fn field<T: serde::de::DeserializeOwned>(field: &str, value: Option<&Value>) -> Result<Option<T>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => T::deserialize(value).map(Some).map_err(|error| ApiError::validation(field, error)),
    }
}

/// Scope ids a body names at its top level (in snake or camel case).
fn body_ids(body: &Map<String, Value>) -> Result<Ids, ApiError> {
    let id = |snake: &str, camel: &str| field::<String>(snake, body.get(snake).or_else(|| body.get(camel)));
    Ok(Ids { user_id: id("user_id", "userId")?, agent_id: id("agent_id", "agentId")?, run_id: id("run_id", "runId")? })
}

/// The ids and remaining conditions of a body's `filters` (none when absent).
fn body_filters(body: &Map<String, Value>) -> Result<(Ids, Option<Value>), ApiError> {
    match body.get("filters") {
        None | Some(Value::Null) => Ok((Ids::default(), None)),
        Some(filters) => shape::read_filters(filters),
    }
}

/// `GET /v1/ping/`: whether the key works. The tenant stands in for Mem0's organisation and
/// project.
async fn ping(RequestCaller(caller): RequestCaller) -> AppJson<Value> {
    AppJson(json!({
        "status": "ok",
        "org_id": caller.tenant,
        "project_id": caller.tenant,
        "user_email": null,
    }))
}

/// Mem0's messages: a string (one user message), one message object, or a list of them. A
/// content object (an image or a document) is not read by this server.
fn messages(value: Option<&Value>) -> Result<Vec<MessageInput>, ApiError> {
    let list = match value {
        Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
        Some(Value::Object(message)) => vec![Value::Object(message.clone())],
        Some(Value::Array(items)) => items.clone(),
        _ => return Err(ApiError::validation("messages", "required: a string, a message or a list of messages")),
    };
    for message in &list {
        if let Some(Value::Object(content)) = message.get("content") {
            let kind = content.get("type").and_then(Value::as_str).unwrap_or("object");
            return Err(unsupported(&format!("message content of type `{kind}`")));
        }
    }
    list.iter()
        .map(|item| MessageInput::deserialize(item).map_err(|error| ApiError::validation("messages", error)))
        .collect()
}

/// Our add request for a Mem0 add body.
fn add_request(body: &Map<String, Value>) -> Result<AddMemoriesRequest, ApiError> {
    check_unsupported(body, &UNSUPPORTED_ADD_FIELDS)?;
    let (filter_ids, _) = body_filters(body)?;
    let ids = body_ids(body)?.or(filter_ids);
    // Mem0 takes Unix seconds here; so do we (or RFC 3339).
    let timestamp = body.get("timestamp").filter(|value| !value.is_null()).cloned();
    Ok(AddMemoriesRequest {
        messages: messages(body.get("messages"))?,
        scope: ScopeIds { user_id: ids.user_id, agent_id: ids.agent_id, run_id: ids.run_id },
        metadata: field("metadata", body.get("metadata"))?,
        expiration_date: field("expiration_date", body.get("expiration_date"))?,
        infer: field("infer", body.get("infer"))?,
        memory_type: field("memory_type", body.get("memory_type"))?,
        // Mem0's per-call extraction guidance is what our `prompt` is.
        prompt: field("custom_instructions", body.get("custom_instructions"))?.or(field("prompt", body.get("prompt"))?),
        timestamp,
        source_type: None,
        source_actor: None,
        evidence_ref: None,
        confidence: None,
        state_key: None,
        event_time: None,
        async_mode: field("async_mode", body.get("async_mode"))?,
    })
}

/// The items of an add in Mem0's form: `{id, memory, data: {memory}, event}`.
fn added(results: Vec<mem0_core::AddedMemory>) -> Vec<Value> {
    results
        .into_iter()
        .map(|item| {
            json!({
                "id": item.id,
                "memory": item.memory,
                "data": {"memory": item.memory},
                "event": item.event,
            })
        })
        .collect()
}

/// `POST /v3/memories/add/`. Adds finish before the answer here (Mem0 queues them), so the
/// status is `SUCCEEDED` and the results are in the response.
async fn add_v3(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppJson(body): AppJson<Value>,
) -> Result<AppJson<Value>, ApiError> {
    let request = add_request(&object(body)?)?;
    if request.async_mode.unwrap_or(false) {
        // Queued as Mem0 queues adds: follow it at /v1/event/{event_id}/.
        let accepted = crate::jobs::enqueue(&state, &caller, request).await?;
        return Ok(AppJson(json!({
            "message": "Memory processing has been queued for background execution",
            "status": "PENDING",
            "event_id": accepted.job_id,
        })));
    }
    let outcome = crate::routes::memories::add(&state, &caller, request).await?;
    let mut response = json!({
        "message": "Memories processed",
        "status": "SUCCEEDED",
        "results": added(outcome.results),
    });
    if !outcome.warnings.is_empty() {
        response["warnings"] = json!(outcome.warnings);
    }
    Ok(AppJson(response))
}

/// `POST /v1/memories/` (older SDKs): a bare list of added items, or `{"results": [...]}` with
/// `output_format: "v1.1"`.
async fn add_v1(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppJson(body): AppJson<Value>,
) -> Result<AppJson<Value>, ApiError> {
    let body = object(body)?;
    let wrapped = body.get("output_format").and_then(Value::as_str) == Some("v1.1");
    let outcome = crate::routes::memories::add(&state, &caller, add_request(&body)?).await?;
    let items = added(outcome.results);
    Ok(AppJson(if wrapped { json!({ "results": items }) } else { Value::Array(items) }))
}

/// Our search request for a Mem0 search body.
fn search_request(body: &Map<String, Value>) -> Result<(SearchRequest, Option<Vec<String>>), ApiError> {
    check_unsupported(body, &[("app_id", "app_id scopes"), ("categories", "filtering by categories")])?;
    let query: String = field("query", body.get("query"))?
        .ok_or_else(|| ApiError::validation("query", "required: what to look for"))?;
    let (filter_ids, filter) = body_filters(body)?;
    let ids = body_ids(body)?.or(filter_ids);
    let metadata = match body.get("metadata") {
        Some(Value::Object(metadata)) => Some(metadata),
        None | Some(Value::Null) => None,
        Some(_) => return Err(ApiError::validation("metadata", "must be an object")),
    };
    let filters = shape::with_metadata(filter, metadata);
    let reference_time =
        body.get("reference_date").filter(|value| !value.is_null()).map(shape::reference_date).transpose()?;
    // Mem0's `latest_only: false` shows what newer memories replaced; ours is the superseded chain.
    let include_superseded = field::<bool>("latest_only", body.get("latest_only"))?.map(|latest| !latest);
    // `keyword_search` asked Mem0 to add keyword matches; hybrid search (the default) always does.
    let request = SearchRequest {
        query,
        filters,
        scope: ScopeIds { user_id: ids.user_id, agent_id: ids.agent_id, run_id: ids.run_id },
        top_k: Some(field("top_k", body.get("top_k").or_else(|| body.get("limit")))?.unwrap_or(MEM0_TOP_K)),
        threshold: field("threshold", body.get("threshold"))?,
        show_expired: field("show_expired", body.get("show_expired"))?,
        include_superseded,
        temporal: None,
        reference_time: reference_time.map(|time| time.to_rfc3339()),
        decay: None,
        mode: Some(SearchModeInput::Hybrid),
        explain: None,
        rerank: field("rerank", body.get("rerank"))?,
    };
    Ok((request, field("fields", body.get("fields"))?))
}

async fn run_search(state: &AppState, caller: &Caller, body: Value) -> Result<Vec<Value>, ApiError> {
    let (request, fields) = search_request(&object(body)?)?;
    let outcome = crate::routes::search::search(state, caller, request).await?;
    Ok(outcome.results.into_iter().map(|item| shape::project(shape::memory(item), fields.as_deref())).collect())
}

/// `POST /v3/memories/search/`: `{"results": [...]}`, best first, each with its `score`.
async fn search_v3(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppJson(body): AppJson<Value>,
) -> Result<AppJson<Value>, ApiError> {
    Ok(AppJson(json!({ "results": run_search(&state, &caller, body).await? })))
}

/// `POST /v1/memories/search/` and `/v2/memories/search/` (older SDKs): a bare list, or
/// `{"results": [...]}` with `output_format: "v1.1"`.
async fn search_legacy(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppJson(body): AppJson<Value>,
) -> Result<AppJson<Value>, ApiError> {
    let wrapped = body.get("output_format").and_then(Value::as_str) == Some("v1.1");
    let results = run_search(&state, &caller, body).await?;
    Ok(AppJson(if wrapped { json!({ "results": results }) } else { Value::Array(results) }))
}

/// `page` and `page_size` of a query string.
#[derive(Debug, Default, Deserialize)]
struct PageQuery {
    page: Option<usize>,
    page_size: Option<usize>,
}

/// One numbered page of the memories a list body selects.
async fn numbered(
    state: &AppState,
    caller: &Caller,
    body: &Map<String, Value>,
    ids: Ids,
    (page, page_size): (usize, usize),
) -> Result<(Vec<Value>, u64), ApiError> {
    check_unsupported(
        body,
        &[("app_id", "app_id scopes"), ("categories", "filtering by categories"), ("keywords", "the keywords filter")],
    )?;
    let (filter_ids, filter) = body_filters(body)?;
    let ids = ids.or(filter_ids);
    let mut conditions: Vec<Value> = filter.into_iter().collect();
    if let Some(start) = field::<String>("start_date", body.get("start_date"))? {
        conditions.push(json!({ "created_at": { "gte": start } }));
    }
    if let Some(end) = field::<String>("end_date", body.get("end_date"))? {
        // A day as the end covers the whole day: before the next one's midnight.
        let bound = match chrono::NaiveDate::parse_from_str(end.trim(), "%Y-%m-%d").map(|day| day.succ_opt()) {
            Ok(Some(next)) => json!({ "lt": next.format("%Y-%m-%d").to_string() }),
            _ => json!({ "lte": end }),
        };
        conditions.push(json!({ "created_at": bound }));
    }
    let filter = match conditions.len() {
        0 => None,
        1 => conditions.pop(),
        _ => Some(json!({ "AND": conditions })),
    };
    let filter = filter.as_ref().map(mem0_core::filter::parse_filter).transpose()?;
    let request = ListRequest {
        scope: ids.scope()?,
        filter,
        page_size,
        cursor: None,
        show_expired: field("show_expired", body.get("show_expired"))?.unwrap_or(false),
        include_superseded: field::<bool>("latest_only", body.get("latest_only"))?.is_some_and(|latest| !latest),
    };
    let listed = state.memory().list_numbered(caller, request, page).await?;
    let fields: Option<Vec<String>> = field("fields", body.get("fields"))?;
    let results = listed.items.into_iter().map(|item| shape::project(shape::memory(item), fields.as_deref())).collect();
    Ok((results, listed.count))
}

/// `POST /v3/memories/` (and `/v2/memories/`): a numbered page, `{count, next, previous,
/// results}`; `page` and `page_size` in the query or the body. A page past the end is empty.
async fn list_v3(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    uri: Uri,
    AppQuery(query): AppQuery<PageQuery>,
    AppJson(body): AppJson<Value>,
) -> Result<AppJson<Value>, ApiError> {
    let body = object(body)?;
    let paging = shape::paging(
        (query.page, query.page_size),
        (field("page", body.get("page"))?, field("page_size", body.get("page_size"))?),
        MEM0_PAGE_SIZE,
    )?;
    let ids = body_ids(&body)?;
    let (results, count) = numbered(&state, &caller, &body, ids, paging).await?;
    Ok(AppJson(shape::numbered_page(uri.path(), paging.0, paging.1, count, results)))
}

/// Query of `GET /v1/memories/` (older SDKs).
#[derive(Debug, Default, Deserialize)]
struct ListV1Query {
    user_id: Option<String>,
    agent_id: Option<String>,
    run_id: Option<String>,
    app_id: Option<String>,
    page: Option<usize>,
    page_size: Option<usize>,
    limit: Option<usize>,
}

/// `GET /v1/memories/?user_id=…` (older SDKs): a bare list of the newest `limit` (default 100)
/// memories, or the numbered envelope when both `page` and `page_size` are given.
async fn list_v1(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    uri: Uri,
    AppQuery(query): AppQuery<ListV1Query>,
) -> Result<AppJson<Value>, ApiError> {
    if query.app_id.is_some() {
        return Err(unsupported("app_id scopes"));
    }
    let ids = Ids { user_id: query.user_id, agent_id: query.agent_id, run_id: query.run_id };
    let envelope = query.page.is_some() && query.page_size.is_some();
    let paging = shape::paging((query.page, query.page_size.or(query.limit)), (None, None), MEM0_PAGE_SIZE)?;
    let (results, count) = numbered(&state, &caller, &Map::new(), ids, paging).await?;
    Ok(AppJson(if envelope {
        shape::numbered_page(uri.path(), paging.0, paging.1, count, results)
    } else {
        Value::Array(results)
    }))
}

/// `GET /v1/memories/{id}/`.
async fn get_memory(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(memory_id): AppPath<String>,
) -> Result<AppJson<Value>, ApiError> {
    let id = parse_memory_id(&memory_id)?;
    Ok(AppJson(shape::memory(state.memory().get(&caller, id).await?)))
}

/// `PUT /v1/memories/{id}/`: `text`, `metadata` (merged), `expiration_date` (`null` clears it).
/// Answers the memory after the change, with `text` as well as `memory` (older SDKs read `text`).
async fn update_memory(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(memory_id): AppPath<String>,
    AppJson(body): AppJson<Value>,
) -> Result<AppJson<Value>, ApiError> {
    let id = parse_memory_id(&memory_id)?;
    let body = object(body)?;
    check_unsupported(&body, &[("timestamp", "changing a memory's timestamp"), ("immutable", "immutable memories")])?;
    let expiration_date = match body.get("expiration_date") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(value) => Some(field::<String>("expiration_date", Some(value))?),
    };
    let request = UpdateMemoryRequest {
        text: field("text", body.get("text"))?,
        metadata: field("metadata", body.get("metadata"))?,
        expiration_date,
        ..UpdateMemoryRequest::default()
    };
    let updated = crate::routes::memories::update(&state, &caller, id, request).await?;
    let mut value = shape::memory(updated);
    value["text"] = value["memory"].clone();
    Ok(AppJson(value))
}

/// Query of `DELETE /v1/memories/{id}/`.
#[derive(Debug, Default, Deserialize)]
struct DeleteQuery {
    delete_linked: Option<bool>,
}

/// `DELETE /v1/memories/{id}/`.
async fn delete_memory(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(memory_id): AppPath<String>,
    AppQuery(query): AppQuery<DeleteQuery>,
) -> Result<AppJson<Value>, ApiError> {
    let id = parse_memory_id(&memory_id)?;
    if query.delete_linked == Some(true) {
        return Err(unsupported("delete_linked"));
    }
    state.memory().delete(&caller, id).await?;
    Ok(AppJson(json!({ "message": "Memory deleted successfully!" })))
}

/// `GET /v1/memories/{id}/history/`: a bare list, oldest first.
async fn history(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(memory_id): AppPath<String>,
) -> Result<AppJson<Value>, ApiError> {
    let id = parse_memory_id(&memory_id)?;
    let entries = state.memory().history(&caller, id).await?;
    Ok(AppJson(Value::Array(entries.into_iter().map(shape::history_entry).collect())))
}

/// Query of `DELETE /v1/memories/`.
#[derive(Debug, Default, Deserialize)]
struct DeleteAllQuery {
    user_id: Option<String>,
    agent_id: Option<String>,
    run_id: Option<String>,
    app_id: Option<String>,
    metadata: Option<String>,
}

/// `DELETE /v1/memories/?user_id=…`: every memory of the scope the ids name. With `*` for every
/// id given, every memory of the caller's tenant (a tenant admin only).
async fn delete_all(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppQuery(query): AppQuery<DeleteAllQuery>,
) -> Result<AppJson<Value>, ApiError> {
    if query.app_id.as_deref().is_some_and(|id| id != "*") {
        return Err(unsupported("app_id scopes"));
    }
    if query.metadata.is_some() {
        return Err(unsupported("deleting by metadata"));
    }
    let given: Vec<&str> = [&query.user_id, &query.agent_id, &query.run_id, &query.app_id]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    if given.is_empty() {
        return Err(ApiError::validation("user_id", "at least one of user_id, agent_id or run_id is required"));
    }
    if given.iter().all(|id| *id == "*") {
        state.memory().reset(&caller).await?;
        return Ok(AppJson(json!({ "message": "Memories deleted successfully!" })));
    }
    if given.contains(&"*") {
        return Err(unsupported("`*` next to a specific id"));
    }
    let scope = mem0_core::Scope::new(query.user_id.as_deref(), query.agent_id.as_deref(), query.run_id.as_deref())?;
    let deleted = state.memory().delete_all(&caller, scope).await?;
    Ok(AppJson(json!({ "message": "Memories deleted successfully!", "deleted": deleted })))
}

/// `GET /v1/entities/`: the users, agents and runs that own memories, as Mem0 lists them
/// (`{count, next, previous, results, total_users, total_agents, total_apps, total_runs}`).
async fn entities(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    uri: Uri,
    AppQuery(query): AppQuery<PageQuery>,
) -> Result<AppJson<Value>, ApiError> {
    let (page, size) = shape::paging((query.page, query.page_size), (None, None), ENTITY_PAGE_SIZE)?;
    let memory = state.memory();
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let listed = memory.scopes(&caller, None, cursor, mem0_core::memory::MAX_PAGE_SIZE).await?;
        all.extend(listed.items);
        cursor = listed.next;
        if cursor.is_none() {
            break;
        }
        if all.len() >= MAX_ENTITIES {
            return Err(unsupported(&format!("listing more than {MAX_ENTITIES} entities (use GET /entities)")));
        }
    }
    let total = |kind: ScopeKind| all.iter().filter(|summary| summary.kind == kind).count();
    let totals = (total(ScopeKind::User), total(ScopeKind::Agent), total(ScopeKind::Run));
    let count = all.len() as u64;
    let results: Vec<Value> = all
        .into_iter()
        .skip((page - 1).saturating_mul(size))
        .take(size)
        .map(|summary| {
            json!({
                "id": summary.id,
                "name": summary.id,
                "type": summary.kind.as_str(),
                "total_memories": summary.total_memories,
                "created_at": summary.created_at,
                "updated_at": summary.updated_at,
                "owner": caller.principal_id,
                "organization": caller.tenant,
                "metadata": null,
            })
        })
        .collect();
    let mut page_value = shape::numbered_page(uri.path(), page, size, count, results);
    page_value["total_users"] = json!(totals.0);
    page_value["total_agents"] = json!(totals.1);
    page_value["total_apps"] = json!(0);
    page_value["total_runs"] = json!(totals.2);
    Ok(AppJson(page_value))
}

/// `DELETE /v2/entities/{type}/{name}/` (and the older `/v1/entities/…`): every memory of one
/// user, agent or run.
async fn delete_entity(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath((entity_type, entity_id)): AppPath<(String, String)>,
) -> Result<AppJson<Value>, ApiError> {
    let id = Some(entity_id.as_str());
    let scope = match entity_type.as_str() {
        "user" => mem0_core::Scope::new(id, None, None)?,
        "agent" => mem0_core::Scope::new(None, id, None)?,
        "run" => mem0_core::Scope::new(None, None, id)?,
        "app" => return Err(unsupported("app_id scopes")),
        _ => return Err(ApiError::validation("entity_type", "must be user, agent, app or run")),
    };
    let deleted = state.memory().delete_all(&caller, scope).await?;
    Ok(AppJson(json!({ "message": "Entity deleted successfully.", "deleted": deleted })))
}

async fn batch() -> Response {
    unsupported("batch updates and deletes").into_response()
}

async fn exports() -> Response {
    unsupported("Mem0's export jobs").into_response()
}

async fn summary() -> Response {
    unsupported("summaries").into_response()
}

async fn feedback() -> Response {
    unsupported("feedback").into_response()
}

/// `GET /v1/event/{event_id}/`: a queued add (`async_mode: true`) in Mem0's event shape.
async fn event(
    State(state): State<AppState>,
    RequestCaller(caller): RequestCaller,
    AppPath(event_id): AppPath<String>,
) -> Result<AppJson<Value>, ApiError> {
    let id = uuid::Uuid::parse_str(&event_id).map_err(|_| ApiError::validation("event_id", "expected a UUID"))?;
    let job = crate::jobs::view(&state, &caller, id).await?;
    let status = match job.status {
        mem0_core::history::JobStatus::Queued => "PENDING",
        mem0_core::history::JobStatus::Running => "RUNNING",
        mem0_core::history::JobStatus::Succeeded => "SUCCEEDED",
        mem0_core::history::JobStatus::Failed => "FAILED",
    };
    let results = job.result.map(|response| added(response.results)).unwrap_or_default();
    let latency = job.finished_at.map(|end| (end - job.created_at).num_milliseconds());
    Ok(AppJson(json!({
        "id": job.id,
        "event_type": "ADD",
        "status": status,
        "results": results,
        "created_at": job.created_at,
        "updated_at": job.finished_at.or(job.started_at).unwrap_or(job.created_at),
        "started_at": job.started_at,
        "completed_at": job.finished_at,
        "latency": latency,
        "error": job.error.map(|error| error.message),
    })))
}

async fn events() -> Response {
    unsupported("listing events").into_response()
}

async fn profiles() -> Response {
    unsupported("profiles").into_response()
}

async fn webhooks() -> Response {
    unsupported("webhooks").into_response()
}

async fn projects() -> Response {
    unsupported("projects").into_response()
}
