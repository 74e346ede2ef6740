//! The `Memory` service: every memory operation, transport-agnostic, with the caller's rights
//! enforced here rather than in handlers.
//!
//! Writes are all-or-nothing per call: embeddings are computed before anything is written, the
//! vector-store write is one transaction, and if the history write that follows fails, the
//! vector-store write is undone before the error is returned.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{debug, error, info, instrument, warn, Instrument as _};
use uuid::Uuid;

use crate::analysis;
use crate::entities;
use crate::error::{Error, ProviderError, ProviderErrorKind, Result};
use crate::extraction::{self, ExtractionInput, PromptMessage};
use crate::filter::{Condition, Field, Filter, Operand, Operator, Scalar, TextField};
use crate::history::{BufferedMessages, HistoryStore, Pending};
use crate::providers::embedder::Embedder;
use crate::providers::llm::{ChatMessage, Llm, LlmRequest, LlmResponse, TokenUsage};
use crate::providers::reranker::Reranker;
use crate::retrieval::{self, Bm25, EntityScores, RetrievalSettings, ScoreExplanation, MAX_QUERY_TERMS};
use crate::scope::{Caller, Role, Scope};
use crate::store::{
    Applied, Cursor, EntityLink, EntityProbe, ScopeCursor, ScopeKind, ScopePage, ScopedQuery, VectorStore, WriteSet,
};
use crate::text;
use crate::types::{memory_hash, HistoryEvent, HistoryRecord, MemoryItem, MemoryRecord, Message, Metadata};

/// Most messages one add call may carry.
pub const MAX_MESSAGES: usize = 100;
/// Longest memory text or message content, in bytes.
pub const MAX_TEXT_BYTES: usize = 32 * 1024;
/// Largest serialised caller metadata, in bytes.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// Longest speaker name (`messages[].name`, stored as `actor_id`), in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest search query, in bytes.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;
/// Upper bound of `top_k` and `page_size`.
pub const MAX_PAGE_SIZE: usize = 1000;
/// Default `page_size` of listings.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Default `top_k` of search.
pub const DEFAULT_TOP_K: usize = 20;
/// Default similarity threshold of search.
pub const DEFAULT_THRESHOLD: f32 = 0.1;

/// Metadata keys the server owns; callers cannot set them through metadata.
const RESERVED_METADATA_KEYS: [&str; 15] = [
    "user_id",
    "agent_id",
    "run_id",
    "actor_id",
    "role",
    "attributed_to",
    "hash",
    "memory",
    "data",
    "id",
    "created_at",
    "updated_at",
    "expiration_date",
    "memory_type",
    "text_lemmatized",
];

/// Input of [`Memory::add`].
#[derive(Debug, Clone, Default)]
pub struct AddRequest {
    /// Owner of the new memories.
    pub scope: Scope,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Caller metadata stored with every new memory.
    pub metadata: Metadata,
    /// Last day the memories are visible.
    pub expiration_date: Option<NaiveDate>,
    /// Extract facts with the LLM (true) or store each message verbatim (false).
    pub infer: bool,
    /// `procedural_memory` or none.
    pub memory_type: Option<String>,
    /// Per-call extraction instructions (LLM path).
    pub prompt: Option<String>,
    /// When the conversation happened (backfilling); defaults to now.
    pub timestamp: Option<DateTime<Utc>>,
}

/// One memory created by [`Memory::add`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddedMemory {
    /// New memory id.
    pub id: Uuid,
    /// Its text.
    pub memory: String,
    /// Always `ADD`: the pipeline never rewrites existing memories.
    pub event: HistoryEvent,
    /// Speaker name of the source message (verbatim path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    /// Role of the source message (verbatim path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// What [`Memory::add`] did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AddOutcome {
    /// The memories created.
    pub results: Vec<AddedMemory>,
    /// Things the caller should know although the call succeeded (e.g. an unreadable model reply).
    pub warnings: Vec<String>,
    /// Tokens the LLM call used, when there was one.
    pub usage: Option<TokenUsage>,
}

/// How fact extraction builds its prompt.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractionSettings {
    /// Instructions added to every extraction prompt (a call's `prompt` replaces them).
    #[serde(default)]
    pub custom_instructions: Option<String>,
    /// Buffered earlier messages of the same session shown as context.
    #[serde(default = "default_context_messages")]
    pub context_messages: usize,
    /// Nearest existing memories shown (for dedup and linking).
    #[serde(default = "default_existing_memories")]
    pub existing_memories: usize,
}

fn default_context_messages() -> usize {
    10
}
fn default_existing_memories() -> usize {
    10
}

impl Default for ExtractionSettings {
    fn default() -> Self {
        Self {
            custom_instructions: None,
            context_messages: default_context_messages(),
            existing_memories: default_existing_memories(),
        }
    }
}

/// Most entities kept per fact, and their longest length in characters.
const MAX_ENTITIES_PER_FACT: usize = 20;
const MAX_ENTITY_CHARS: usize = 100;

/// Input of [`Memory::list`].
#[derive(Debug, Clone)]
pub struct ListRequest {
    /// Whose memories; empty only for admins listing their whole tenant.
    pub scope: Scope,
    /// Further conditions.
    pub filter: Option<Filter>,
    /// Rows per page, 1..=1000.
    pub page_size: usize,
    /// Token from the previous page's `next`.
    pub cursor: Option<String>,
    /// Include expired memories.
    pub show_expired: bool,
}

/// One page of [`Memory::list`].
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Memories, newest first.
    pub items: Vec<MemoryItem>,
    /// Token for the next page, when there is one.
    pub next: Option<String>,
}

/// Input of [`Memory::search`].
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// Whose memories.
    pub scope: Scope,
    /// Further conditions.
    pub filter: Option<Filter>,
    /// What to look for.
    pub query: String,
    /// Most results, 1..=1000.
    pub top_k: usize,
    /// Lowest similarity returned, in [0, 1].
    pub threshold: f32,
    /// Include expired memories.
    pub show_expired: bool,
    /// Which retrievers produce candidates.
    pub mode: SearchMode,
    /// Return each result's score components.
    pub explain: bool,
    /// Reorder the best candidates with the configured reranker.
    pub rerank: bool,
}

/// Which retrievers produce search candidates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Dense, BM25 and entity candidates, fused.
    #[default]
    Hybrid,
    /// Embedding similarity only.
    Dense,
    /// BM25 only.
    Keyword,
}

/// What [`Memory::search`] found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SearchOutcome {
    /// Best first.
    pub results: Vec<MemoryItem>,
    /// Things the caller should know (e.g. a reranker that failed and was skipped).
    pub warnings: Vec<String>,
}

/// Input of [`Memory::update`]; at least one field must be present.
#[derive(Debug, Clone, Default)]
pub struct UpdateRequest {
    /// New text (re-embedded).
    pub text: Option<String>,
    /// Keys merged into the metadata.
    pub metadata: Option<Metadata>,
    /// `Some(None)` clears the expiration, `Some(Some(d))` sets it.
    pub expiration_date: Option<Option<NaiveDate>>,
}

/// The memory service.
#[derive(Clone)]
pub struct Memory {
    store: Arc<dyn VectorStore>,
    history: HistoryStore,
    embedder: Arc<dyn Embedder>,
    llm: Option<Arc<dyn Llm>>,
    extraction: ExtractionSettings,
    retrieval: RetrievalSettings,
    reranker: Option<Arc<dyn Reranker>>,
    rerank_candidates: usize,
    /// Embeddings of entity names seen in queries (names repeat: "Caroline" in every question
    /// about her), so a search embeds only the query and new names. Bounded; per embedder.
    query_entities: Arc<std::sync::Mutex<HashMap<String, Vec<f32>>>>,
    /// Called at the named steps of every write (crash drills in tests); `None` in production.
    fail_point: Option<FailPoint>,
    /// Journal entries of the writes this process is committing: recovery leaves them alone.
    writing: Arc<std::sync::Mutex<HashSet<Uuid>>>,
}

/// A hook called with the name of each step of the write path (`write.before_commit`,
/// `write.after_commit`, `write.after_delivery`), so a test can stop the process exactly there.
pub type FailPoint = Arc<dyn Fn(&'static str) + Send + Sync>;

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("store", &self.store)
            .field("embedder", &self.embedder.model_id())
            .field("llm", &self.llm.as_ref().map(|llm| llm.model().to_owned()))
            .field("retrieval", &self.retrieval)
            .finish_non_exhaustive()
    }
}

/// Most entity-name embeddings kept for queries.
const QUERY_ENTITY_CACHE: usize = 10_000;

impl Memory {
    /// Builds the service and checks the store's embedding dimension against the embedder's.
    ///
    /// # Errors
    /// [`Error::Config`] on a dimension mismatch; store errors.
    pub async fn new(store: Arc<dyn VectorStore>, history: HistoryStore, embedder: Arc<dyn Embedder>) -> Result<Self> {
        store.ensure_dimension(embedder.dimension(), embedder.model_id()).await?;
        let memory = Self {
            store,
            history,
            embedder,
            llm: None,
            extraction: ExtractionSettings::default(),
            retrieval: RetrievalSettings::default(),
            reranker: None,
            rerank_candidates: 30,
            query_entities: Arc::default(),
            fail_point: None,
            writing: Arc::default(),
        };
        Ok(memory)
    }

    /// Writes this process is committing right now (each runs to its end on its own task).
    pub fn writes_in_flight(&self) -> usize {
        self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Returns the service with `hook` called at each step of the write path (tests only).
    #[must_use]
    pub fn with_fail_point(mut self, hook: FailPoint) -> Self {
        self.fail_point = Some(hook);
        self
    }

    fn fail_point(&self, step: &'static str) {
        if let Some(hook) = &self.fail_point {
            hook(step);
        }
    }

    /// Delivers journal entries older than `min_age` to the history volume and removes them from
    /// the journal; returns how many were delivered. Entries of writes this process is still
    /// committing are left alone. Run it once when the service starts (before it serves): it
    /// completes the writes a crash interrupted. Run periodically it also completes writes whose
    /// undo failed. Only one process may use a store's journal this way (one server per store).
    ///
    /// # Errors
    /// Store errors; entries not delivered stay in the journal.
    pub async fn recover(&self, min_age: std::time::Duration) -> Result<usize> {
        const BATCH: usize = 500;
        let before = Utc::now() - chrono::Duration::from_std(min_age).unwrap_or_default();
        let mut delivered = 0;
        loop {
            let entries = self.store.journal(before, BATCH).await?;
            let in_flight = self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            let mut records = Vec::new();
            let mut batches = Vec::new();
            let mut ids = Vec::new();
            for entry in entries.iter().filter(|entry| !in_flight.contains(&entry.id)) {
                match Pending::from_entry(entry) {
                    Ok(Pending::History { record, .. }) => records.push(*record),
                    Ok(Pending::Messages { batch }) => batches.push(batch),
                    Err(error) => {
                        // Kept (not deleted): a later version may read it; the rest goes on.
                        error!(entry = %entry.id, %error, "a journal entry cannot be read; skipped");
                        continue;
                    }
                }
                ids.push(entry.id);
            }
            if ids.is_empty() {
                return Ok(delivered);
            }
            self.history.deliver(&records, &batches).await?;
            self.store.settle(&ids).await?;
            delivered += ids.len();
            if entries.len() < BATCH {
                return Ok(delivered);
            }
        }
    }

    /// Returns the service with `llm` (or none) for fact extraction and procedural memory.
    #[must_use]
    pub fn with_llm(mut self, llm: Option<Arc<dyn Llm>>, extraction: ExtractionSettings) -> Self {
        self.llm = llm;
        self.extraction = extraction;
        self
    }

    /// Returns the service with these hybrid-search weights and candidate counts.
    #[must_use]
    pub fn with_retrieval(mut self, retrieval: RetrievalSettings) -> Self {
        self.retrieval = retrieval;
        self
    }

    /// Returns the service with `reranker` (or none) reordering the best `candidates` of a search
    /// that asks for it.
    #[must_use]
    pub fn with_reranker(mut self, reranker: Option<Arc<dyn Reranker>>, candidates: usize) -> Self {
        self.reranker = reranker;
        self.rerank_candidates = candidates.clamp(1, MAX_PAGE_SIZE);
        self
    }

    /// Returns the reranker in use, when one is configured.
    pub fn reranker(&self) -> Option<&Arc<dyn Reranker>> {
        self.reranker.as_ref()
    }

    /// Returns the hybrid-search settings in use.
    pub fn retrieval(&self) -> &RetrievalSettings {
        &self.retrieval
    }

    /// Returns the LLM in use, when one is configured.
    pub fn llm(&self) -> Option<&Arc<dyn Llm>> {
        self.llm.as_ref()
    }

    /// Returns a service using `embedder` with the same stores, after checking the store's
    /// embedding dimension against it.
    ///
    /// # Errors
    /// [`Error::Config`] on a dimension mismatch; store errors.
    pub async fn with_embedder(&self, embedder: Arc<dyn Embedder>) -> Result<Self> {
        self.store.ensure_dimension(embedder.dimension(), embedder.model_id()).await?;
        Ok(Self { embedder, query_entities: Arc::default(), ..self.clone() })
    }

    /// Returns the history volume (history, message buffer, API keys, request log).
    pub fn history_store(&self) -> &HistoryStore {
        &self.history
    }

    /// Returns the embedder in use.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// Stores memories from a conversation: verbatim (`infer=false`), as facts extracted by the
    /// LLM (`infer=true`), or as one procedural summary (`memory_type = procedural_memory`).
    ///
    /// # Errors
    /// Validation, scope, store and provider errors; on any error nothing is stored.
    #[instrument(skip_all, fields(tenant = %caller.tenant, infer = request.infer, messages = request.messages.len()))]
    pub async fn add(&self, caller: &Caller, request: AddRequest) -> Result<AddOutcome> {
        caller.require(Role::Write)?;
        if request.scope.is_empty() {
            return Err(Error::validation("user_id", "at least one of user_id, agent_id or run_id is required"));
        }
        caller.check_scope(&request.scope)?;
        if request.messages.is_empty() {
            return Err(Error::validation("messages", "at least one message is required"));
        }
        if request.messages.len() > MAX_MESSAGES {
            return Err(Error::validation("messages", format!("at most {MAX_MESSAGES} messages per call")));
        }
        if let Some(memory_type) = &request.memory_type {
            if memory_type != "procedural_memory" {
                return Err(Error::validation("memory_type", "the only memory type is `procedural_memory`"));
            }
        }
        for (index, message) in request.messages.iter().enumerate() {
            if !matches!(message.role.as_str(), "user" | "assistant" | "system") {
                return Err(Error::validation(
                    format!("messages[{index}].role"),
                    "must be one of user, assistant, system",
                ));
            }
            if message.content.len() > MAX_TEXT_BYTES {
                return Err(Error::validation(
                    format!("messages[{index}].content"),
                    format!("at most {MAX_TEXT_BYTES} bytes"),
                ));
            }
            text::reject_nul(&format!("messages[{index}].content"), &message.content)?;
            if let Some(name) = &message.name {
                text::reject_nul(&format!("messages[{index}].name"), name)?;
                if name.len() > MAX_NAME_BYTES {
                    return Err(Error::validation(
                        format!("messages[{index}].name"),
                        format!("at most {MAX_NAME_BYTES} bytes"),
                    ));
                }
            }
        }
        if let Some(prompt) = &request.prompt {
            if prompt.len() > MAX_TEXT_BYTES {
                return Err(Error::validation("prompt", format!("at most {MAX_TEXT_BYTES} bytes")));
            }
            text::reject_nul("prompt", prompt)?;
        }
        let metadata = sanitize_metadata(request.metadata.clone())?;
        if request.memory_type.is_some() {
            if request.scope.agent_id.is_none() {
                return Err(Error::validation("agent_id", "procedural memory needs an agent_id"));
            }
            return self.add_procedural(caller, request, metadata).await;
        }
        if request.infer {
            return self.add_inferred(caller, request, metadata).await;
        }
        self.add_verbatim(caller, request, metadata).await
    }

    /// `infer=false`: every non-system message becomes a memory as it is.
    async fn add_verbatim(&self, caller: &Caller, request: AddRequest, metadata: Metadata) -> Result<AddOutcome> {
        let sources: Vec<&Message> = request
            .messages
            .iter()
            .filter(|message| message.role != "system" && !message.content.trim().is_empty())
            .collect();
        if sources.is_empty() {
            return Ok(AddOutcome::default());
        }
        let texts: Vec<String> = sources.iter().map(|message| message.content.trim().to_owned()).collect();
        let names: Vec<Vec<String>> = texts.iter().map(|text| entity_names(text)).collect();
        let (embeddings, name_vectors) = self.embed_with_entities(&texts, &names).await?;
        let now = stored_now();
        let created_at = request.timestamp.map(|at| at.trunc_subsecs(6)).unwrap_or(now);
        let records: Vec<MemoryRecord> = sources
            .iter()
            .zip(texts)
            .zip(embeddings)
            .zip(names)
            .map(|(((message, text), embedding), entities)| MemoryRecord {
                id: Uuid::now_v7(),
                tenant: caller.tenant.clone(),
                scope: request.scope.clone(),
                hash: memory_hash(&text),
                memory: text,
                metadata: metadata.clone(),
                created_at,
                updated_at: created_at,
                expiration_date: request.expiration_date,
                attributed_to: None,
                role: Some(message.role.clone()),
                actor_id: message.name.clone(),
                memory_type: None,
                linked_memory_ids: Vec::new(),
                entities,
                text_lemmatized: String::new(),
                embedding,
            })
            .map(with_analysis)
            .collect();
        let links = entity_links(&records, &name_vectors, "proper");
        self.write_new(caller, &records, &links, None, now).await?;
        Ok(AddOutcome { results: added(records), warnings: Vec::new(), usage: None })
    }

    /// `infer=true`: one LLM call turns the new messages (with the session's earlier messages and
    /// the nearest existing memories as context) into facts; new facts are stored, the messages
    /// buffered, all or nothing.
    async fn add_inferred(&self, caller: &Caller, request: AddRequest, metadata: Metadata) -> Result<AddOutcome> {
        let llm = self.llm.clone().ok_or(Error::LlmNotConfigured)?;
        let now = stored_now();
        let observed_at = request.timestamp.map(|at| at.trunc_subsecs(6)).unwrap_or(now);
        let new_messages: Vec<PromptMessage> = request
            .messages
            .iter()
            .filter(|message| !message.content.trim().is_empty())
            .map(|message| PromptMessage {
                role: message.role.clone(),
                name: message.name.clone(),
                content: message.content.trim().to_owned(),
            })
            .collect();
        if new_messages.is_empty() {
            return Ok(AddOutcome::default());
        }
        let session = extraction::session_scope(&request.scope);
        let earlier: Vec<PromptMessage> = self
            .history
            .recent_messages(&caller.tenant, &session, self.extraction.context_messages)
            .await?
            .into_iter()
            .map(|message| PromptMessage { role: message.role, name: message.name, content: message.content })
            .collect();

        // The nearest live memories of exactly this scope: context for the model, and dedup.
        let query_vector = self.embedder.embed(&extraction::flatten(&new_messages)).await?;
        let scope_query = self.scoped_query(caller, request.scope.clone(), None, false);
        let existing: Vec<MemoryRecord> = if self.extraction.existing_memories == 0 {
            Vec::new()
        } else {
            self.store
                .search(&scope_query, &query_vector, self.extraction.existing_memories, 0.0)
                .await?
                .into_iter()
                .map(|scored| scored.record)
                .collect()
        };
        let existing_texts: Vec<String> = existing.iter().map(|record| record.memory.clone()).collect();
        let custom = request.prompt.as_deref().or(self.extraction.custom_instructions.as_deref());
        let user_prompt = extraction::user_prompt(&ExtractionInput {
            earlier: &earlier,
            existing: &existing_texts,
            new_messages: &new_messages,
            observation_date: observed_at.date_naive(),
            custom_instructions: custom,
        });
        let llm_request = LlmRequest {
            messages: vec![
                ChatMessage::system(extraction::system_prompt(&request.scope)),
                ChatMessage::user(user_prompt),
            ],
            json: true,
        };
        let response = complete_logged(llm.as_ref(), &llm_request, "extraction").await?;
        let facts = match extraction::parse_facts(&response.text) {
            Ok(facts) => facts,
            Err(reason) => {
                let preview: String = response.text.chars().take(200).collect();
                warn!(%reason, reply_chars = response.text.chars().count(), %preview, "unreadable extraction reply; nothing stored");
                return Ok(AddOutcome {
                    results: Vec::new(),
                    warnings: vec![format!(
                        "the model's reply could not be read as facts ({reason}); nothing was stored, retry the call"
                    )],
                    usage: Some(response.usage),
                });
            }
        };

        let mut warnings = Vec::new();
        let mut seen: HashSet<String> = existing.iter().map(|record| record.hash.clone()).collect();
        let mut kept = Vec::new();
        for fact in facts {
            if fact.text.len() > MAX_TEXT_BYTES {
                warnings.push(format!("a fact longer than {MAX_TEXT_BYTES} bytes was dropped"));
                continue;
            }
            let hash = memory_hash(&fact.text);
            if seen.insert(hash.clone()) {
                kept.push((fact, hash));
            }
        }
        // Exact duplicates anywhere in the scope, not only among the nearest memories.
        if !kept.is_empty() {
            let known = self.existing_hashes(caller, &request.scope, kept.iter().map(|(_, hash)| hash.clone())).await?;
            kept.retain(|(_, hash)| !known.contains(hash));
        }

        let buffered = BufferedMessages {
            id: Uuid::now_v7(),
            tenant: caller.tenant.clone(),
            session,
            at: observed_at,
            // Only the newest BUFFER_KEEP of a call: the buffer keeps no more of a session anyway.
            messages: {
                let said: Vec<Message> =
                    request.messages.iter().filter(|message| message.role != "system").cloned().collect();
                let skip = said.len().saturating_sub(crate::history::BUFFER_KEEP);
                said.into_iter().skip(skip).collect()
            },
        };
        let texts: Vec<String> = kept.iter().map(|(fact, _)| fact.text.clone()).collect();
        let names: Vec<Vec<String>> = kept.iter().map(|(fact, _)| clean_entities(fact.entities.clone())).collect();
        let (embeddings, name_vectors) = self.embed_with_entities(&texts, &names).await?;
        let mut invented = 0usize;
        let records: Vec<MemoryRecord> = kept
            .into_iter()
            .zip(embeddings)
            .zip(names)
            .map(|(((fact, hash), embedding), entities)| {
                let mut linked = Vec::new();
                for short_id in &fact.linked_ids {
                    match short_id
                        .trim_matches(|c: char| !c.is_ascii_digit())
                        .parse::<usize>()
                        .ok()
                        .and_then(|index| index.checked_sub(1))
                        .and_then(|index| existing.get(index))
                    {
                        Some(record) if !linked.contains(&record.id) => linked.push(record.id),
                        Some(_) => {}
                        None => invented += 1,
                    }
                }
                MemoryRecord {
                    id: Uuid::now_v7(),
                    tenant: caller.tenant.clone(),
                    scope: request.scope.clone(),
                    memory: fact.text,
                    hash,
                    metadata: metadata.clone(),
                    created_at: observed_at,
                    updated_at: observed_at,
                    expiration_date: request.expiration_date,
                    attributed_to: fact.attributed_to,
                    role: None,
                    actor_id: None,
                    memory_type: None,
                    linked_memory_ids: linked,
                    entities,
                    text_lemmatized: String::new(),
                    embedding,
                }
            })
            .map(with_analysis)
            .collect();
        if invented > 0 {
            debug!(invented, "ignored linked memory ids the model made up");
        }
        let links = entity_links(&records, &name_vectors, "llm");
        self.write_new(caller, &records, &links, Some(buffered), now).await?;
        Ok(AddOutcome { results: added(records), warnings, usage: Some(response.usage) })
    }

    /// `memory_type = procedural_memory`: one LLM call summarises the agent's run into one memory.
    async fn add_procedural(&self, caller: &Caller, request: AddRequest, metadata: Metadata) -> Result<AddOutcome> {
        let llm = self.llm.clone().ok_or(Error::LlmNotConfigured)?;
        let now = stored_now();
        let observed_at = request.timestamp.map(|at| at.trunc_subsecs(6)).unwrap_or(now);
        let transcript: Vec<String> = request
            .messages
            .iter()
            .filter(|message| !message.content.trim().is_empty())
            .map(|message| format!("{}: {}", message.role, message.content.trim()))
            .collect();
        if transcript.is_empty() {
            return Ok(AddOutcome::default());
        }
        let system = request.prompt.clone().unwrap_or_else(|| extraction::PROCEDURAL_PROMPT.to_owned());
        let llm_request = LlmRequest {
            messages: vec![
                ChatMessage::system(system),
                ChatMessage::user(format!(
                    "## Conversation\n{}\n\nWrite the procedural memory of this conversation.",
                    transcript.join("\n")
                )),
            ],
            json: false,
        };
        let response = complete_logged(llm.as_ref(), &llm_request, "procedural memory").await?;
        let summary = extraction::clean_summary(&response.text);
        if summary.is_empty() {
            return Err(ProviderError::new(
                ProviderErrorKind::BadResponse,
                llm.provider(),
                "the model returned an empty summary",
            )
            .into());
        }
        let summary = truncate_to_bytes(summary, MAX_TEXT_BYTES);
        let embedding = self.embedder.embed(&summary).await?;
        let record = MemoryRecord {
            id: Uuid::now_v7(),
            tenant: caller.tenant.clone(),
            scope: request.scope.clone(),
            hash: memory_hash(&summary),
            memory: summary,
            metadata,
            created_at: observed_at,
            updated_at: observed_at,
            expiration_date: request.expiration_date,
            attributed_to: None,
            role: None,
            actor_id: None,
            memory_type: Some("procedural_memory".to_owned()),
            linked_memory_ids: Vec::new(),
            entities: Vec::new(),
            text_lemmatized: String::new(),
            embedding,
        };
        let records = vec![with_analysis(record)];
        self.write_new(caller, &records, &[], None, now).await?;
        Ok(AddOutcome { results: added(records), warnings: Vec::new(), usage: Some(response.usage) })
    }

    /// Hashes among `hashes` that memories of exactly `scope` already have.
    async fn existing_hashes(
        &self,
        caller: &Caller,
        scope: &Scope,
        hashes: impl Iterator<Item = String>,
    ) -> Result<HashSet<String>> {
        let values: Vec<Scalar> = hashes.map(Scalar::Text).collect();
        let filter = Filter::Condition(Condition {
            field: Field::Text(TextField::Hash),
            op: Operator::In,
            value: Operand::Many(values),
        });
        let query = self.scoped_query(caller, scope.clone(), Some(filter), false);
        // A full page: the scope may hold one hash many times (verbatim adds), hiding others.
        let page = self.store.list(&query, None, MAX_PAGE_SIZE).await?;
        Ok(page.records.into_iter().map(|record| record.hash).collect())
    }

    /// Embeds texts and the distinct entity names in one batch call; returns the texts' vectors
    /// in order and the names' vectors by name.
    async fn embed_with_entities(
        &self,
        texts: &[String],
        names: &[Vec<String>],
    ) -> Result<(Vec<Vec<f32>>, HashMap<String, Vec<f32>>)> {
        let mut distinct: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for name in names.iter().flatten() {
            if seen.insert(name.clone()) {
                distinct.push(name.clone());
            }
        }
        let mut batch: Vec<String> = texts.to_vec();
        batch.extend(distinct.iter().cloned());
        if batch.is_empty() {
            return Ok((Vec::new(), HashMap::new()));
        }
        let mut vectors = self.embedder.embed_batch(&batch).await?;
        if vectors.len() != batch.len() {
            return Err(Error::Internal("embedder returned a wrong number of vectors".into()));
        }
        let name_vectors = vectors.split_off(texts.len());
        Ok((vectors, distinct.into_iter().zip(name_vectors).collect()))
    }

    /// Writes new memories, their entity links, their ADD history and (optionally) buffered
    /// messages, all or nothing (see [`Memory::commit`]).
    async fn write_new(
        &self,
        caller: &Caller,
        records: &[MemoryRecord],
        links: &[EntityLink],
        buffered: Option<BufferedMessages>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let history: Vec<HistoryRecord> =
            records.iter().map(|record| HistoryRecord::for_event(record, HistoryEvent::Add, None, now)).collect();
        let write = WriteSet {
            tenant: caller.tenant.clone(),
            insert: records.to_vec(),
            links: links.to_vec(),
            merge_threshold: self.retrieval.entity_merge_threshold,
            ..WriteSet::default()
        };
        self.commit(write, history, buffered).await.map(|_| ())
    }

    /// Commits a change with its history: the change and its journal entries (history entries,
    /// buffered messages) in one store transaction, then the entries to the history volume, then
    /// the journal entries are removed. If the history volume refuses them, the change is undone
    /// (and its journal entries with it) and the error returned: the caller sees nothing changed.
    /// A crash after the store transaction leaves the entries in the journal, delivered by
    /// [`Memory::recover`] at the next start, so a committed change always gets its history and
    /// history never describes a change that did not happen.
    async fn commit(
        &self,
        write: WriteSet,
        history: Vec<HistoryRecord>,
        buffered: Option<BufferedMessages>,
    ) -> Result<Applied> {
        // On its own task: a caller that goes away (a client that disconnects, a request
        // timeout) cannot cut the write between its store transaction and its history.
        let memory = self.clone();
        let task = tokio::spawn(
            async move { memory.commit_now(write, history, buffered).await }.instrument(tracing::Span::current()),
        );
        task.await.map_err(|error| Error::Internal(format!("write task failed: {error}")))?
    }

    async fn commit_now(
        &self,
        mut write: WriteSet,
        history: Vec<HistoryRecord>,
        buffered: Option<BufferedMessages>,
    ) -> Result<Applied> {
        let now = Utc::now();
        let mut pending: Vec<Pending> = history
            .into_iter()
            .map(|record| Pending::History {
                tenant: record.tenant.clone(),
                scope: record.scope.clone(),
                record: Box::new(record),
            })
            .collect();
        if let Some(batch) = buffered.filter(|batch| !batch.messages.is_empty()) {
            pending.push(Pending::Messages { batch });
        }
        write.journal = pending.iter().map(|item| item.to_entry(now)).collect::<Result<_>>()?;
        let journal: Vec<Uuid> = write.journal.iter().map(|entry| entry.id).collect();
        let _writing = Writing::register(&self.writing, &journal);
        self.fail_point("write.before_commit");
        let applied = self.store.apply(&write).await?;
        self.fail_point("write.after_commit");
        let mut records = Vec::new();
        let mut batches = Vec::new();
        for item in pending {
            match item {
                Pending::History { record, .. } if applied.missing.contains(&record.memory_id) => {}
                Pending::History { record, .. } => records.push(*record),
                Pending::Messages { batch } => batches.push(batch),
            }
        }
        if let Err(error) = self.history.deliver(&records, &batches).await {
            let undo = write.inverse(&applied, journal);
            if let Err(undo_error) = self.store.apply(&undo).await {
                // The change stays with its journal entries; recovery delivers its history.
                warn!(%error, %undo_error, "history write failed and the change could not be undone; its history stays in the journal");
            }
            return Err(error);
        }
        self.fail_point("write.after_delivery");
        if let Err(error) = self.store.settle(&journal).await {
            // Delivered twice later is harmless: delivery ignores what is already there.
            warn!(%error, "could not clear delivered journal entries; recovery will");
        }
        Ok(applied)
    }

    /// Returns one memory. Expired memories are returned too.
    ///
    /// # Errors
    /// [`Error::MemoryNotFound`] when missing or outside the caller's reach.
    #[instrument(skip_all, fields(tenant = %caller.tenant, memory_id = %id))]
    pub async fn get(&self, caller: &Caller, id: Uuid) -> Result<MemoryItem> {
        caller.require(Role::Read)?;
        Ok(self.visible(caller, id).await?.into())
    }

    /// Lists memories of a scope, newest first, one page at a time.
    ///
    /// # Errors
    /// Validation (page size, cursor), scope errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant, page_size = request.page_size))]
    pub async fn list(&self, caller: &Caller, request: ListRequest) -> Result<ListPage> {
        caller.require(Role::Read)?;
        if request.scope.is_empty() {
            caller.require(Role::Admin).map_err(|_| {
                Error::Forbidden("listing without user_id, agent_id or run_id needs the admin role".into())
            })?;
        }
        caller.check_scope(&request.scope)?;
        check_bound("page_size", request.page_size)?;
        let cursor = request.cursor.as_deref().map(Cursor::decode).transpose()?;
        let query = self.scoped_query(caller, request.scope, request.filter, request.show_expired);
        let page = self.store.list(&query, cursor, request.page_size).await?;
        Ok(ListPage {
            items: page.records.into_iter().map(MemoryItem::from).collect(),
            next: page.next.map(|cursor| cursor.encode()),
        })
    }

    /// Finds the memories of a scope most similar to a query (dense search).
    ///
    /// # Errors
    /// Validation (query, top_k, threshold), scope and embedder errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant, top_k = request.top_k))]
    pub async fn search(&self, caller: &Caller, request: SearchRequest) -> Result<SearchOutcome> {
        caller.require(Role::Read)?;
        if request.scope.is_empty() {
            return Err(Error::validation("filters", "at least one of user_id, agent_id or run_id is required"));
        }
        caller.check_scope(&request.scope)?;
        let query_text = request.query.trim();
        text::reject_nul("query", query_text)?;
        if query_text.is_empty() {
            return Err(Error::validation("query", "cannot be empty"));
        }
        if query_text.len() > MAX_QUERY_BYTES {
            return Err(Error::validation("query", format!("at most {MAX_QUERY_BYTES} bytes")));
        }
        check_bound("top_k", request.top_k)?;
        if !(0.0..=1.0).contains(&request.threshold) {
            return Err(Error::validation("threshold", "must be between 0 and 1"));
        }
        let query = self.scoped_query(caller, request.scope, request.filter, request.show_expired);
        let mut scored: Vec<(MemoryRecord, ScoreExplanation)> = match request.mode {
            SearchMode::Dense => {
                let vector = self.embedder.embed(query_text).await?;
                let hits = self.store.search(&query, &vector, request.top_k, request.threshold).await?;
                hits.into_iter()
                    .map(|hit| {
                        let explanation =
                            ScoreExplanation::new([hit.score, 0.0, 0.0], 0.0, [1.0, 0.0, 0.0], vec!["dense".into()]);
                        (hit.record, explanation)
                    })
                    .collect()
            }
            SearchMode::Keyword => {
                let bm25 = self.bm25(&query, query_text).await?;
                let ids: Vec<Uuid> = bm25.top(request.top_k).into_iter().map(|(id, _)| id).collect();
                self.store
                    .get_many(&caller.tenant, &ids)
                    .await?
                    .into_iter()
                    .map(|record| {
                        let signals = [0.0, bm25.normalised(&record.id), 0.0];
                        let raw = bm25.scores.get(&record.id).copied().unwrap_or_default() as f32;
                        (record, ScoreExplanation::new(signals, raw, [0.0, 1.0, 0.0], vec!["keyword".into()]))
                    })
                    .collect()
            }
            SearchMode::Hybrid => self.hybrid(&query, query_text, request.top_k).await?,
        };
        scored.retain(|(_, explanation)| retrieval::clears_threshold(explanation, request.threshold));
        scored.sort_by(|a, b| b.1.score().total_cmp(&a.1.score()).then_with(|| a.0.id.cmp(&b.0.id)));
        let mut warnings = Vec::new();
        let mut rerank_scores: Option<Vec<f32>> = None;
        if request.rerank {
            match &self.reranker {
                None => warnings.push(
                    "rerank was asked for but no reranker is configured (memory.reranker); results are in fused order"
                        .to_owned(),
                ),
                Some(_) if scored.is_empty() => {}
                Some(reranker) => {
                    scored.truncate(self.rerank_candidates.max(request.top_k));
                    let documents: Vec<String> = scored.iter().map(|(record, _)| record.memory.clone()).collect();
                    match reranker.rerank(query_text, &documents).await {
                        Ok(scores) => rerank_scores = Some(scores),
                        Err(error) => {
                            warn!(reranker = reranker.name(), %error, "reranker failed; keeping the fused order");
                            warnings.push(format!(
                                "the reranker failed ({}); results are in fused order",
                                error.kind.code()
                            ));
                        }
                    }
                }
            }
        }
        let mut results: Vec<MemoryItem> = scored
            .into_iter()
            .enumerate()
            .map(|(index, (record, explanation))| MemoryItem {
                score: Some(explanation.score()),
                rerank_score: rerank_scores.as_ref().and_then(|scores| scores.get(index).copied()),
                explain: request.explain.then_some(explanation),
                ..MemoryItem::from(record)
            })
            .collect();
        if rerank_scores.is_some() {
            // Stable: equal rerank scores keep the fused order.
            results.sort_by(|a, b| b.rerank_score.unwrap_or(0.0).total_cmp(&a.rerank_score.unwrap_or(0.0)));
        }
        results.truncate(request.top_k);
        Ok(SearchOutcome { results, warnings })
    }

    /// BM25 of the query's terms over the memories of the query's scope.
    async fn bm25(&self, query: &ScopedQuery, text: &str) -> Result<Bm25> {
        let mut terms = analysis::terms(text);
        let mut seen = HashSet::new();
        terms.retain(|term| seen.insert(term.clone()));
        terms.truncate(MAX_QUERY_TERMS);
        // Without terms the store still reports the scope's size (entity weighting uses it).
        let postings = self.store.keyword_postings(query, &terms).await?;
        Ok(Bm25::score(&postings, &terms))
    }

    /// Candidates from the dense, keyword and entity retrievers, each scored on every signal.
    async fn hybrid(
        &self,
        query: &ScopedQuery,
        text: &str,
        top_k: usize,
    ) -> Result<Vec<(MemoryRecord, ScoreExplanation)>> {
        let pool = self.retrieval.candidates.max(top_k).min(MAX_PAGE_SIZE);
        // The query and the entities it names, embedded in one call.
        let mut names: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for name in entity_names(text) {
            let normalized = entities::normalize(&name);
            if !normalized.is_empty() && seen.insert(normalized) {
                names.push(name);
            }
        }
        let mut known: HashMap<String, Vec<f32>> = {
            let cache = self.query_entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            names.iter().filter_map(|name| cache.get(name).map(|vector| (name.clone(), vector.clone()))).collect()
        };
        let unknown: Vec<String> = names.iter().filter(|name| !known.contains_key(*name)).cloned().collect();
        let mut batch = vec![text.to_owned()];
        batch.extend(unknown.iter().cloned());
        let mut vectors = self.embedder.embed_batch(&batch).await?;
        if vectors.len() != batch.len() {
            return Err(Error::Internal("embedder returned a wrong number of vectors".into()));
        }
        let new_vectors = vectors.split_off(1);
        let vector = vectors.pop().ok_or_else(|| Error::Internal("embedder returned no vector".into()))?;
        {
            let mut cache = self.query_entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if cache.len() + unknown.len() > QUERY_ENTITY_CACHE {
                cache.clear();
            }
            for (name, embedding) in unknown.into_iter().zip(new_vectors) {
                cache.insert(name.clone(), embedding.clone());
                known.insert(name, embedding);
            }
        }
        let probes: Vec<EntityProbe> = names
            .iter()
            .filter_map(|name| {
                known.get(name).map(|embedding| EntityProbe {
                    normalized: entities::normalize(name),
                    embedding: embedding.clone(),
                })
            })
            .collect();
        let (dense, bm25, entity_hits) = futures::try_join!(
            self.store.search(query, &vector, pool, 0.0),
            self.bm25(query, text),
            self.store.entity_memories(query, &probes, self.retrieval.entity_match_threshold)
        )?;
        let entity = EntityScores::new(&entity_hits, probes.len(), bm25.doc_count);

        let mut candidates: HashMap<Uuid, (MemoryRecord, Vec<String>)> = HashMap::new();
        for hit in dense {
            candidates.insert(hit.record.id, (hit.record, vec!["dense".to_owned()]));
        }
        let keyword_ids: Vec<Uuid> = bm25.top(pool).into_iter().map(|(id, _)| id).collect();
        let entity_ids: Vec<Uuid> = entity.top(pool);
        let missing: Vec<Uuid> = keyword_ids
            .iter()
            .chain(&entity_ids)
            .filter(|id| !candidates.contains_key(id))
            .copied()
            .collect::<HashSet<Uuid>>()
            .into_iter()
            .collect();
        for record in self.store.get_many(&query.tenant, &missing).await? {
            candidates.insert(record.id, (record, Vec::new()));
        }
        for (source, ids) in [("keyword", &keyword_ids), ("entity", &entity_ids)] {
            for id in ids {
                if let Some((_, sources)) = candidates.get_mut(id) {
                    sources.push(source.to_owned());
                }
            }
        }
        let weights = self.retrieval.normalised_weights();
        Ok(candidates
            .into_values()
            .map(|(record, sources)| {
                let signals = [
                    retrieval::semantic(&vector, &record.embedding),
                    bm25.normalised(&record.id),
                    entity.signal(&record.id),
                ];
                let raw = bm25.scores.get(&record.id).copied().unwrap_or_default() as f32;
                (record, ScoreExplanation::new(signals, raw, weights, sources))
            })
            .collect())
    }

    /// Changes text, metadata (merged) and/or expiration of a memory.
    ///
    /// # Errors
    /// Validation, [`Error::MemoryNotFound`], embedder and store errors; on error nothing changes.
    #[instrument(skip_all, fields(tenant = %caller.tenant, memory_id = %id))]
    pub async fn update(&self, caller: &Caller, id: Uuid, request: UpdateRequest) -> Result<MemoryItem> {
        caller.require(Role::Write)?;
        if request.text.is_none() && request.metadata.is_none() && request.expiration_date.is_none() {
            return Err(Error::validation(
                "text",
                "at least one of text, metadata or expiration_date must be provided",
            ));
        }
        let new_text = request.text.as_deref().map(str::trim).map(str::to_owned);
        if let Some(new_text) = &new_text {
            text::reject_nul("text", new_text)?;
        }
        if let Some(text) = &new_text {
            if text.is_empty() {
                return Err(Error::validation("text", "cannot be empty"));
            }
            if text.len() > MAX_TEXT_BYTES {
                return Err(Error::validation("text", format!("at most {MAX_TEXT_BYTES} bytes")));
            }
        }
        let metadata_update = request.metadata.map(sanitize_metadata).transpose()?;
        let old = self.visible(caller, id).await?;
        let mut updated = old.clone();
        // A new text gets new entities (the store keeps the old links for an undo).
        let mut relink: Option<Vec<EntityLink>> = None;
        if let Some(text) = new_text.filter(|text| *text != old.memory) {
            let names = entity_names(&text);
            let (mut vectors, name_vectors) =
                self.embed_with_entities(std::slice::from_ref(&text), std::slice::from_ref(&names)).await?;
            updated.embedding = vectors.pop().ok_or_else(|| Error::Internal("embedder returned no vector".into()))?;
            updated.hash = memory_hash(&text);
            updated.text_lemmatized = analysis::lemmatize(&text);
            updated.memory = text;
            updated.entities = names;
            relink = Some(entity_links(std::slice::from_ref(&updated), &name_vectors, "proper"));
        }
        if let Some(metadata) = metadata_update {
            updated.metadata.extend(metadata);
            check_metadata_size(&updated.metadata)?;
        }
        if let Some(expiration) = request.expiration_date {
            updated.expiration_date = expiration;
        }
        let now = stored_now();
        updated.updated_at = now;
        let entry = HistoryRecord::for_event(&updated, HistoryEvent::Update, Some(old.memory.clone()), now);
        let write = WriteSet {
            tenant: caller.tenant.clone(),
            update: vec![updated.clone()],
            relink: if relink.is_some() { vec![id] } else { Vec::new() },
            links: relink.unwrap_or_default(),
            merge_threshold: self.retrieval.entity_merge_threshold,
            ..WriteSet::default()
        };
        self.commit(write, vec![entry], None).await?;
        Ok(updated.into())
    }

    /// Deletes one memory.
    ///
    /// # Errors
    /// [`Error::MemoryNotFound`], store errors; on error nothing changes.
    #[instrument(skip_all, fields(tenant = %caller.tenant, memory_id = %id))]
    pub async fn delete(&self, caller: &Caller, id: Uuid) -> Result<()> {
        caller.require(Role::Write)?;
        let record = self.visible(caller, id).await?;
        let entry = HistoryRecord::for_event(&record, HistoryEvent::Delete, Some(record.memory.clone()), stored_now());
        let write = WriteSet { tenant: caller.tenant.clone(), delete: vec![id], ..WriteSet::default() };
        self.commit(write, vec![entry], None).await?;
        Ok(())
    }

    /// Deletes every memory of exactly `scope` (every id given must match; others are untouched)
    /// with its history, and the scope's buffered conversation. Returns how many were deleted.
    ///
    /// # Errors
    /// Validation (empty scope), scope and store errors. Memories are deleted in chunks of
    /// 1,000, each all or nothing; an error stops before the next chunk.
    #[instrument(skip_all, fields(tenant = %caller.tenant))]
    pub async fn delete_all(&self, caller: &Caller, scope: Scope) -> Result<usize> {
        caller.require(Role::Admin)?;
        if scope.is_empty() {
            return Err(Error::validation(
                "user_id",
                "at least one of user_id, agent_id or run_id is required; use reset to delete everything",
            ));
        }
        caller.check_scope(&scope)?;
        // Memories added after the listing stay. Each chunk of 1,000 is deleted with its history
        // all or nothing; an error stops before the next chunk.
        let query = self.scoped_query(caller, scope.clone(), None, true);
        let mut doomed: Vec<MemoryRecord> = Vec::new();
        let mut cursor = None;
        loop {
            let page = self.store.list(&query, cursor, MAX_PAGE_SIZE).await?;
            doomed.extend(page.records);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let now = stored_now();
        let mut deleted = 0;
        for chunk in doomed.chunks(MAX_PAGE_SIZE) {
            let entries: Vec<HistoryRecord> = chunk
                .iter()
                .map(|record| HistoryRecord::for_event(record, HistoryEvent::Delete, Some(record.memory.clone()), now))
                .collect();
            let write = WriteSet {
                tenant: caller.tenant.clone(),
                delete: chunk.iter().map(|record| record.id).collect(),
                // Deleted meanwhile by someone else: skipped, without a second DELETE entry.
                skip_missing: true,
                ..WriteSet::default()
            };
            deleted += self.commit(write, entries, None).await?.deleted.len();
        }
        // The conversation buffer of these scopes goes too: it is raw user text. So do buffered
        // messages still waiting in the journal, which would otherwise arrive later.
        if let Err(error) = self.history.forget_sessions(&caller.tenant, &scope).await {
            warn!(%error, "memories deleted, but their scope's conversation buffer could not be");
        }
        if let Err(error) = self.forget_journalled_sessions(&caller.tenant, &scope).await {
            warn!(%error, "memories deleted, but buffered messages in the journal could not be");
        }
        Ok(deleted)
    }

    /// Removes buffered-message batches of sessions under `scope` from the journal.
    async fn forget_journalled_sessions(&self, tenant: &str, scope: &Scope) -> Result<()> {
        let everything = Utc::now() + chrono::Duration::days(1);
        let doomed: Vec<Uuid> = self
            .store
            .journal(everything, 100_000)
            .await?
            .iter()
            .filter(|entry| entry.tenant == tenant && entry.memory_id.is_none())
            .filter(|entry| match Pending::from_entry(entry) {
                Ok(Pending::Messages { batch }) => crate::history::session_under(&batch.session, scope),
                _ => false,
            })
            .map(|entry| entry.id)
            .collect();
        self.store.settle(&doomed).await
    }

    /// Returns the changes of one memory, oldest first; works after the memory was deleted.
    ///
    /// # Errors
    /// [`Error::MemoryNotFound`] when there is no history the caller may see.
    #[instrument(skip_all, fields(tenant = %caller.tenant, memory_id = %id))]
    pub async fn history(&self, caller: &Caller, id: Uuid) -> Result<Vec<HistoryRecord>> {
        caller.require(Role::Read)?;
        let entries = self.history.for_memory(&caller.tenant, id).await?;
        let visible = match self.store.get(&caller.tenant, id).await? {
            Some(record) => caller.can_see(&record.tenant, &record.scope),
            None => entries.first().is_some_and(|entry| caller.can_see(&entry.tenant, &entry.scope)),
        };
        if !visible {
            return Err(Error::MemoryNotFound { id: id.to_string() });
        }
        Ok(entries)
    }

    /// Deletes every memory, history entry and buffered message of the caller's tenant.
    ///
    /// # Errors
    /// [`Error::Forbidden`] unless admin; store errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant))]
    pub async fn reset(&self, caller: &Caller) -> Result<()> {
        caller.require(Role::Admin)?;
        if !caller.is_tenant_admin() {
            return Err(Error::Forbidden("reset needs an admin that is not bound to a scope".into()));
        }
        self.store.reset(Some(&caller.tenant)).await?;
        self.history.reset(Some(&caller.tenant)).await
    }

    /// Deletes every memory, history entry and buffered message of every tenant.
    ///
    /// # Errors
    /// [`Error::Forbidden`] unless a global admin; store errors.
    #[instrument(skip_all, fields(principal = %caller.principal_id))]
    pub async fn reset_all(&self, caller: &Caller) -> Result<()> {
        if !caller.global_admin {
            return Err(Error::Forbidden("a global reset needs the global admin".into()));
        }
        self.store.reset(None).await?;
        self.history.reset(None).await
    }

    /// Lists the scope ids of the caller's tenant that own memories, with counts, ordered by
    /// type (`agent`, `run`, `user`) then id, one page at a time.
    ///
    /// # Errors
    /// [`Error::Forbidden`] unless admin; validation of `limit` and `after`; store errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant))]
    pub async fn scopes(
        &self,
        caller: &Caller,
        kind: Option<ScopeKind>,
        after: Option<String>,
        limit: usize,
    ) -> Result<ScopePage> {
        caller.require(Role::Admin)?;
        check_bound("limit", limit)?;
        let after = after.as_deref().map(ScopeCursor::decode).transpose()?;
        let kinds: Vec<ScopeKind> = match kind {
            Some(kind) => vec![kind],
            None => ScopeKind::ALL.to_vec(),
        };
        let mut items = Vec::new();
        for kind in kinds {
            let start = match &after {
                Some(cursor) if cursor.kind > kind => continue,
                Some(cursor) if cursor.kind == kind => Some(cursor.id.clone()),
                _ => None,
            };
            // One extra row tells whether another page exists.
            let wanted = limit + 1 - items.len();
            let mut rows = self.store.scopes(&caller.tenant, kind, start.as_deref(), wanted).await?;
            rows.retain(|summary| caller.can_see(&caller.tenant, &summary.as_scope()));
            items.extend(rows);
            if items.len() > limit {
                break;
            }
        }
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|last| ScopeCursor { kind: last.kind, id: last.id.clone() }.encode())
        } else {
            None
        };
        Ok(ScopePage { items, next })
    }

    /// Builds the keyword index and entity links of memories written before they existed (or
    /// restored from a dump without them), in batches of `batch`; returns how many were
    /// analysed. Safe to run while serving, and again: analysed memories are skipped.
    ///
    /// # Errors
    /// Store and embedder errors; memories done before the error stay done.
    pub async fn reindex(&self, batch: usize) -> Result<usize> {
        let mut after = None;
        let mut analysed = 0;
        loop {
            let records = self.store.unanalysed(after, batch.clamp(1, MAX_PAGE_SIZE)).await?;
            let Some(last) = records.last() else {
                return Ok(analysed);
            };
            after = Some(last.id);
            let mut updated: Vec<MemoryRecord> = Vec::with_capacity(records.len());
            for mut record in records {
                record.text_lemmatized = analysis::lemmatize(&record.memory);
                if record.entities.is_empty() {
                    record.entities = entity_names(&record.memory);
                }
                updated.push(record);
            }
            let names: Vec<Vec<String>> = updated.iter().map(|record| record.entities.clone()).collect();
            let (_, name_vectors) = self.embed_with_entities(&[], &names).await?;
            // Each row only if nobody changed or deleted it since it was read (an update
            // re-analyses it anyway): a reindex beside a serving server never reverts a change.
            let write = WriteSet {
                relink: updated.iter().map(|record| record.id).collect(),
                links: entity_links(&updated, &name_vectors, "proper"),
                update: updated.clone(),
                merge_threshold: self.retrieval.entity_merge_threshold,
                expect: updated.iter().map(|record| (record.id, record.updated_at)).collect(),
                ..WriteSet::default()
            };
            match self.store.apply(&write).await {
                Ok(_) => {}
                Err(Error::MemoryNotFound { .. } | Error::Conflict(_)) => {
                    // One of the batch changed meanwhile: the others one by one.
                    for record in &updated {
                        let single = WriteSet {
                            relink: vec![record.id],
                            links: write.links.iter().filter(|link| link.memory_id == record.id).cloned().collect(),
                            update: vec![record.clone()],
                            merge_threshold: write.merge_threshold,
                            expect: vec![(record.id, record.updated_at)],
                            ..WriteSet::default()
                        };
                        match self.store.apply(&single).await {
                            Ok(_) | Err(Error::MemoryNotFound { .. } | Error::Conflict(_)) => {}
                            Err(error) => return Err(error),
                        }
                    }
                }
                Err(error) => return Err(error),
            }
            analysed += updated.len();
            info!(analysed, "reindexed memories");
        }
    }

    /// Checks that both stores answer.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`].
    pub async fn ready(&self) -> Result<()> {
        self.store.ping().await?;
        self.history.ping().await
    }

    async fn visible(&self, caller: &Caller, id: Uuid) -> Result<MemoryRecord> {
        match self.store.get(&caller.tenant, id).await? {
            Some(record) if caller.can_see(&record.tenant, &record.scope) => Ok(record),
            _ => Err(Error::MemoryNotFound { id: id.to_string() }),
        }
    }

    fn scoped_query(&self, caller: &Caller, scope: Scope, filter: Option<Filter>, show_expired: bool) -> ScopedQuery {
        ScopedQuery { tenant: caller.tenant.clone(), scope, filter, show_expired, today: Utc::now().date_naive() }
    }
}

/// Marks journal entries as belonging to a write in progress, until dropped.
struct Writing<'a> {
    set: &'a std::sync::Mutex<HashSet<Uuid>>,
    ids: Vec<Uuid>,
}

impl<'a> Writing<'a> {
    fn register(set: &'a std::sync::Mutex<HashSet<Uuid>>, ids: &[Uuid]) -> Self {
        set.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(ids.iter().copied());
        Self { set, ids: ids.to_vec() }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut set = self.set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in &self.ids {
            set.remove(id);
        }
    }
}

/// Runs one LLM call and logs its token usage (`purpose`: what the call was for).
async fn complete_logged(llm: &dyn Llm, request: &LlmRequest, purpose: &'static str) -> Result<LlmResponse> {
    let response = llm.complete(request).await?;
    info!(
        purpose,
        provider = llm.provider(),
        model = llm.model(),
        prompt_tokens = response.usage.prompt_tokens,
        completion_tokens = response.usage.completion_tokens,
        "llm call"
    );
    Ok(response)
}

/// Named things in a memory text, found without a model (rule-based English, tagged Chinese).
fn entity_names(text: &str) -> Vec<String> {
    clean_entities(entities::extract(text).into_iter().map(|entity| entity.text).collect())
}

/// The entity links of new records, one per (record, entity) with a usable name.
fn entity_links(records: &[MemoryRecord], vectors: &HashMap<String, Vec<f32>>, kind: &str) -> Vec<EntityLink> {
    records
        .iter()
        .flat_map(|record| {
            record.entities.iter().filter_map(move |name| {
                let normalized = entities::normalize(name);
                let embedding = vectors.get(name)?;
                (!normalized.is_empty()).then(|| EntityLink {
                    memory_id: record.id,
                    tenant: record.tenant.clone(),
                    scope: record.scope.clone(),
                    name: name.clone(),
                    normalized,
                    kind: kind.to_owned(),
                    embedding: embedding.clone(),
                })
            })
        })
        .collect()
}

/// Fills the analysed text of a new record (the keyword index is built from it).
fn with_analysis(mut record: MemoryRecord) -> MemoryRecord {
    record.text_lemmatized = analysis::lemmatize(&record.memory);
    record
}

fn added(records: Vec<MemoryRecord>) -> Vec<AddedMemory> {
    records
        .into_iter()
        .map(|record| AddedMemory {
            id: record.id,
            memory: record.memory,
            event: HistoryEvent::Add,
            actor_id: record.actor_id,
            role: record.role,
        })
        .collect()
}

/// Trims, drops empty, over-long and repeated (case-insensitively) entity names; bounds the count.
fn clean_entities(entities: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    entities
        .into_iter()
        .map(|entity| entity.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|entity| !entity.is_empty() && entity.chars().count() <= MAX_ENTITY_CHARS)
        .filter(|entity| seen.insert(entity.to_lowercase()))
        .take(MAX_ENTITIES_PER_FACT)
        .collect()
}

fn truncate_to_bytes(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// The current time at the precision the stores keep (microseconds), so what a write returns
/// equals what a later read returns.
fn stored_now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

fn check_bound(field: &str, value: usize) -> Result<()> {
    if (1..=MAX_PAGE_SIZE).contains(&value) {
        Ok(())
    } else {
        Err(Error::validation(field, format!("must be between 1 and {MAX_PAGE_SIZE}")))
    }
}

/// Drops reserved keys (scope ids and server-owned fields) from caller metadata and bounds its size.
fn sanitize_metadata(mut metadata: Metadata) -> Result<Metadata> {
    for (key, value) in &metadata {
        text::reject_nul("metadata", key)?;
        text::reject_nul_in_json("metadata", value)?;
    }
    let dropped: Vec<String> =
        metadata.keys().filter(|key| RESERVED_METADATA_KEYS.contains(&key.as_str())).cloned().collect();
    for key in &dropped {
        metadata.remove(key);
    }
    if !dropped.is_empty() {
        warn!(keys = ?dropped, "dropped reserved keys from caller metadata");
    }
    if let Some(key) = metadata.keys().find(|key| key.is_empty() || key.len() > 256) {
        return Err(Error::validation("metadata", format!("key `{key}` must be 1-256 bytes")));
    }
    check_metadata_size(&metadata)?;
    Ok(metadata)
}

fn check_metadata_size(metadata: &Metadata) -> Result<()> {
    let size = Value::Object(metadata.clone()).to_string().len();
    if size > MAX_METADATA_BYTES {
        return Err(Error::validation("metadata", format!("at most {MAX_METADATA_BYTES} bytes when serialised")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reserved_metadata_keys_are_dropped() {
        let Value::Object(metadata) = json!({"user_id": "eve", "created_at": "1999", "topic": "food", "role": "x"})
        else {
            panic!("object")
        };
        let clean = sanitize_metadata(metadata).expect("valid");
        assert_eq!(Value::Object(clean), json!({"topic": "food"}));
    }

    #[test]
    fn oversized_metadata_is_rejected() {
        let Value::Object(metadata) = json!({"blob": "x".repeat(MAX_METADATA_BYTES)}) else { panic!("object") };
        assert!(sanitize_metadata(metadata).is_err());
    }

    #[test]
    fn bounds_are_one_to_a_thousand() {
        assert!(check_bound("top_k", 0).is_err());
        assert!(check_bound("top_k", 1).is_ok());
        assert!(check_bound("top_k", 1000).is_ok());
        assert!(check_bound("top_k", 1001).is_err());
    }
}
