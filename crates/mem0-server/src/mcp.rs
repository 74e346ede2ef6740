//! The Model Context Protocol server: memory tools for coding assistants and desktop agents, over
//! streamable HTTP at `/mcp` (stateless, so any replica answers any call) and over stdio
//! (`mem0-server mcp --stdio`, for clients that launch a process).
//!
//! Over HTTP `/mcp` sits behind the same guard as the REST routes (credentials, tenant, rate
//! limit), and every tool calls what the REST route calls with the request's caller, so a key
//! bound to a user reaches only that user's memories here too. Over stdio the caller is the
//! `MEM0_API_KEY` given to the process (or, with authentication disabled, the local admin).
//! Failures are tool results marked as errors whose text starts with our error code, so the
//! model reads what went wrong.

use std::sync::Arc;

use mem0_core::memory::ListRequest;
use mem0_core::{Caller, MemoryItem};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{parse_memory_id, ApiError, ErrorCode};
use crate::routes::memories::{AddMemoriesRequest, MessageContent, MessageInput, UpdateMemoryRequest};
use crate::routes::search::{SearchModeInput, SearchRequest};
use crate::routes::ScopeIds;
use crate::state::AppState;

/// Results of `search_memories` unless the model asks for another number.
const DEFAULT_TOP_K: usize = 10;
/// Memories per `list_memories` page unless the model asks for another number.
const DEFAULT_PAGE_SIZE: usize = 50;

const INSTRUCTIONS: &str = "Long-term memory of users and agents. Before answering, search_memories \
for what you may already know (user preferences, facts, past decisions); when the user tells you \
something worth remembering, add_memory. Memories belong to a user_id, agent_id and/or run_id; \
when your credential is bound to one user or agent, it is the default.";

/// Who a memory belongs to (at least one, unless the credential is bound to a user or agent).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct ScopeArgs {
    /// The user the memories are about.
    #[serde(default)]
    pub user_id: Option<String>,
    /// The agent the memories belong to.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// A run, session or conversation.
    #[serde(default)]
    pub run_id: Option<String>,
}

/// One message of a conversation.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct MessageArg {
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// What was said.
    pub content: String,
}

/// Arguments of `add_memory`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    /// Something to remember, in one self-contained sentence (e.g. "Alice is allergic to
    /// peanuts"). Give this or `messages`.
    #[serde(default)]
    pub text: Option<String>,
    /// A conversation to remember what matters from. Give this or `text`.
    #[serde(default)]
    pub messages: Option<Vec<MessageArg>>,
    #[serde(flatten)]
    pub scope: ScopeArgs,
    /// Labels stored with the memory, e.g. {"topic": "health"}.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// true: extract short facts with the server's LLM; false: store the text as it is. Default:
    /// true when the server has an LLM configured.
    #[serde(default)]
    pub infer: Option<bool>,
}

/// Arguments of `search_memories`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SearchArgs {
    /// What to look for, in natural language.
    pub query: String,
    #[serde(flatten)]
    pub scope: ScopeArgs,
    /// Most results (1 to 100, default 10).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Conditions on metadata or fields, e.g. {"topic": "health"} or {"created_at": {"gte":
    /// "2026-01-01"}}.
    #[serde(default)]
    pub filters: Option<Map<String, Value>>,
}

/// Arguments of `list_memories`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListArgs {
    #[serde(flatten)]
    pub scope: ScopeArgs,
    /// Memories per page (1 to 1000, default 50), newest first.
    #[serde(default)]
    pub page_size: Option<usize>,
    /// The `next` value of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// A memory id.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct IdArgs {
    /// The memory's id (a UUID from a search or listing).
    pub memory_id: String,
}

/// Arguments of `update_memory`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct UpdateArgs {
    /// The memory's id.
    pub memory_id: String,
    /// Its new text.
    #[serde(default)]
    pub text: Option<String>,
    /// Labels merged into its metadata.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// The memory tools, for one caller (stdio) or for each request's caller (HTTP).
#[derive(Clone)]
pub struct MemoryTools {
    state: AppState,
    caller: Option<Arc<Caller>>,
}

impl MemoryTools {
    /// Tools answering for each HTTP request's caller.
    pub fn for_requests(state: AppState) -> Self {
        Self { state, caller: None }
    }

    /// Tools answering for `caller` (stdio: one process, one credential).
    pub fn for_caller(state: AppState, caller: Caller) -> Self {
        Self { state, caller: Some(Arc::new(caller)) }
    }

    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ApiError> {
        if let Some(caller) = &self.caller {
            return Ok((**caller).clone());
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| ApiError::new(ErrorCode::Unauthenticated, "no caller for this request"))
    }

    /// The scope ids given, or those the credential is bound to when it names exactly one.
    fn scope(caller: &Caller, args: ScopeArgs) -> ScopeIds {
        let only = |ids: &Option<Vec<String>>| match ids.as_deref() {
            Some([id]) => Some(id.clone()),
            _ => None,
        };
        let bound = args.user_id.is_none() && args.agent_id.is_none() && args.run_id.is_none();
        ScopeIds {
            user_id: args.user_id.or_else(|| bound.then(|| only(&caller.grant.user_ids)).flatten()),
            agent_id: args.agent_id.or_else(|| bound.then(|| only(&caller.grant.agent_ids)).flatten()),
            run_id: args.run_id,
        }
    }
}

fn ok(value: &Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value.to_string())])
}

fn failed(error: &ApiError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", error.code_name(), error.message()))])
}

fn answer(result: Result<Value, ApiError>) -> Result<CallToolResult, ErrorData> {
    Ok(match result {
        Ok(value) => ok(&value),
        Err(error) => failed(&error),
    })
}

/// What a model needs of a memory (the REST shape without the bookkeeping).
fn brief(item: MemoryItem) -> Value {
    let mut value = json!({
        "id": item.id,
        "memory": item.memory,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
    });
    for (key, field) in [("user_id", item.user_id), ("agent_id", item.agent_id), ("run_id", item.run_id)] {
        if let Some(id) = field {
            value[key] = json!(id);
        }
    }
    if let Some(metadata) = item.metadata {
        value["metadata"] = json!(metadata);
    }
    if let Some(score) = item.score {
        value["score"] = json!(score);
    }
    value
}

#[tool_router]
impl MemoryTools {
    #[tool(description = "Remember something about a user or agent: a fact in one sentence (`text`) or a \
        conversation (`messages`) to extract the facts worth keeping from. Returns the memories stored.")]
    async fn add_memory(
        &self,
        Parameters(args): Parameters<AddArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.add(args, &context).await)
    }

    #[tool(
        description = "Search what is remembered about a user or agent, best match first, with a relevance \
            score from 0 to 1. Use it before answering questions that may depend on earlier conversations.",
        annotations(read_only_hint = true)
    )]
    async fn search_memories(
        &self,
        Parameters(args): Parameters<SearchArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.search(args, &context).await)
    }

    #[tool(
        description = "List the memories of a user, agent or run, newest first, one page at a time \
            (pass `next` back as `cursor`).",
        annotations(read_only_hint = true)
    )]
    async fn list_memories(
        &self,
        Parameters(args): Parameters<ListArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.list(args, &context).await)
    }

    #[tool(
        description = "Get one memory by its id (from a search or a listing): its text, owner, labels and times.",
        annotations(read_only_hint = true)
    )]
    async fn get_memory(
        &self,
        Parameters(args): Parameters<IdArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.get(args, &context).await)
    }

    #[tool(description = "Correct a memory: replace its text and/or merge labels into its metadata. The \
        old text stays in its history.")]
    async fn update_memory(
        &self,
        Parameters(args): Parameters<UpdateArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.update(args, &context).await)
    }

    #[tool(
        description = "Forget one memory (when the user asks, or it is wrong). Its history is kept.",
        annotations(destructive_hint = true)
    )]
    async fn delete_memory(
        &self,
        Parameters(args): Parameters<IdArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.delete(args, &context).await)
    }

    #[tool(
        description = "The changes of one memory, oldest first: when it was added, each text it had, and \
            whether it was deleted.",
        annotations(read_only_hint = true)
    )]
    async fn memory_history(
        &self,
        Parameters(args): Parameters<IdArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.history(args, &context).await)
    }
}

impl MemoryTools {
    async fn add(&self, args: AddArgs, context: &RequestContext<RoleServer>) -> Result<Value, ApiError> {
        let caller = self.caller(context)?;
        let messages: Vec<MessageInput> = match (args.text, args.messages) {
            (Some(text), None) => {
                vec![MessageInput { role: "user".to_owned(), content: Some(MessageContent::Text(text)), name: None }]
            }
            (None, Some(messages)) if !messages.is_empty() => messages
                .into_iter()
                .map(|message| MessageInput {
                    role: message.role,
                    content: Some(MessageContent::Text(message.content)),
                    name: None,
                })
                .collect(),
            _ => return Err(ApiError::validation("text", "give either `text` or a non-empty `messages`")),
        };
        let infer = args.infer.unwrap_or_else(|| self.state.memory().llm().is_some());
        let request = AddMemoriesRequest {
            messages,
            scope: Self::scope(&caller, args.scope),
            metadata: args.metadata,
            infer: Some(infer),
            ..AddMemoriesRequest::default()
        };
        let added = crate::routes::memories::add(&self.state, &caller, request).await?;
        Ok(json!({ "results": added.results, "warnings": added.warnings }))
    }

    async fn search(&self, args: SearchArgs, context: &RequestContext<RoleServer>) -> Result<Value, ApiError> {
        let caller = self.caller(context)?;
        let top_k = args.top_k.unwrap_or(DEFAULT_TOP_K);
        if !(1..=100).contains(&top_k) {
            return Err(ApiError::validation("top_k", "must be between 1 and 100"));
        }
        let request = SearchRequest {
            query: args.query,
            filters: args.filters.map(Value::Object),
            scope: Self::scope(&caller, args.scope),
            top_k: Some(top_k),
            mode: Some(SearchModeInput::Hybrid),
            ..SearchRequest::default()
        };
        let found = crate::routes::search::search(&self.state, &caller, request).await?;
        let results: Vec<Value> = found.results.into_iter().map(brief).collect();
        Ok(json!({ "results": results }))
    }

    async fn list(&self, args: ListArgs, context: &RequestContext<RoleServer>) -> Result<Value, ApiError> {
        let caller = self.caller(context)?;
        let scope = Self::scope(&caller, args.scope).scope()?;
        let request = ListRequest {
            scope,
            filter: None,
            page_size: args.page_size.unwrap_or(DEFAULT_PAGE_SIZE),
            cursor: args.cursor,
            show_expired: false,
            include_superseded: false,
        };
        let page = self.state.memory().list(&caller, request).await?;
        let results: Vec<Value> = page.items.into_iter().map(brief).collect();
        Ok(json!({ "results": results, "next": page.next }))
    }

    async fn get(&self, args: IdArgs, context: &RequestContext<RoleServer>) -> Result<Value, ApiError> {
        let caller = self.caller(context)?;
        let id = parse_memory_id(&args.memory_id)?;
        Ok(brief(self.state.memory().get(&caller, id).await?))
    }

    async fn update(&self, args: UpdateArgs, context: &RequestContext<RoleServer>) -> Result<Value, ApiError> {
        let caller = self.caller(context)?;
        let id = parse_memory_id(&args.memory_id)?;
        if args.text.is_none() && args.metadata.is_none() {
            return Err(ApiError::validation("text", "give `text` and/or `metadata`"));
        }
        let request =
            UpdateMemoryRequest { text: args.text, metadata: args.metadata, ..UpdateMemoryRequest::default() };
        Ok(brief(crate::routes::memories::update(&self.state, &caller, id, request).await?))
    }

    async fn delete(&self, args: IdArgs, context: &RequestContext<RoleServer>) -> Result<Value, ApiError> {
        let caller = self.caller(context)?;
        let id = parse_memory_id(&args.memory_id)?;
        self.state.memory().delete(&caller, id).await?;
        Ok(json!({ "deleted": id }))
    }

    async fn history(&self, args: IdArgs, context: &RequestContext<RoleServer>) -> Result<Value, ApiError> {
        let caller = self.caller(context)?;
        let id = parse_memory_id(&args.memory_id)?;
        let entries = self.state.memory().history(&caller, id).await?;
        let entries: Vec<Value> = entries
            .into_iter()
            .map(|entry| {
                json!({
                    "event": entry.event,
                    "old_memory": entry.old_memory,
                    "new_memory": entry.new_memory,
                    "at": entry.created_at,
                })
            })
            .collect();
        Ok(json!({ "history": entries }))
    }
}

#[tool_handler]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mem0-rs", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// `/mcp`: streamable HTTP, stateless (no session to keep, so every replica answers every call),
/// JSON answers. Host and Origin checks are the server's own (the browser guard), not rmcp's
/// loopback-only default, so a deployment under its own name works.
pub fn router(state: AppState) -> axum::Router<AppState> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts();
    let tools = MemoryTools::for_requests(state);
    let service =
        StreamableHttpService::new(move || Ok(tools.clone()), Arc::new(NeverSessionManager::default()), config);
    axum::Router::new().route_service("/mcp", service)
}

/// `mem0-server mcp --stdio`: the tools over stdin and stdout for the caller `api_key` names
/// (`MEM0_API_KEY`; with authentication disabled, none is needed and the caller is the local
/// admin), until the client closes stdin. The logs are written before it returns.
///
/// # Errors
/// A missing or refused key, or a transport failure.
pub async fn serve_stdio(state: AppState, api_key: Option<&str>) -> anyhow::Result<()> {
    use rmcp::ServiceExt as _;
    let mut headers = axum::http::HeaderMap::new();
    if let Some(key) = api_key.map(str::trim).filter(|key| !key.is_empty()) {
        let value =
            axum::http::HeaderValue::from_str(key).map_err(|_| anyhow::anyhow!("MEM0_API_KEY is not a valid key"))?;
        headers.insert("x-api-key", value);
    }
    let caller = state.auth.authenticate(&headers).await.map_err(|error| {
        anyhow::anyhow!("MEM0_API_KEY: {} (set it to the API key this MCP client acts with)", error.message())
    })?;
    tracing::info!(tenant = %caller.tenant, principal = %caller.principal_id, "serving MCP on stdio");
    let running = MemoryTools::for_caller(state.clone(), caller)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|error| anyhow::anyhow!("cannot start MCP on stdio: {error}"))?;
    let ended = running.waiting().await;
    tokio::join!(state.request_log.flush(), state.audit.flush(), state.reads.flush());
    ended.map(|_| ()).map_err(|error| anyhow::anyhow!("MCP on stdio ended with an error: {error}"))
}
