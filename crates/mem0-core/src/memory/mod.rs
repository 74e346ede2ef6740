//! The `Memory` service: every memory operation, transport-agnostic, with the caller's rights
//! enforced here rather than in handlers. This file holds the service, its wiring and the reads;
//! the rest is by concern:
//! - `add.rs`: adding memories (verbatim, extracted by the LLM, procedural);
//! - `writes.rs`: the all-or-nothing write path (store transaction with a history journal, then
//!   the history volume), updates, deletes and crash recovery;
//! - `search.rs`: search modes, threshold and reranking (retrieval itself is
//!   [`crate::retrieval::Retriever`]);
//! - `admin.rs`: resets, scope listing, re-analysis;
//! - `transfer.rs`: export and import as JSON lines;
//! - `limits.rs`: the bounds every operation checks; `requests.rs`: requests and outcomes.

mod add;
mod admin;
mod limits;
mod requests;
mod search;
mod transfer;
mod writes;

use std::collections::HashSet;
use std::sync::Arc;

use chrono::Utc;
use tracing::instrument;
use uuid::Uuid;

use self::limits::check_bound;
pub use self::limits::{
    DEFAULT_PAGE_SIZE, DEFAULT_THRESHOLD, DEFAULT_TOP_K, MAX_MESSAGES, MAX_METADATA_BYTES, MAX_NAME_BYTES,
    MAX_PAGE_SIZE, MAX_QUERY_BYTES, MAX_TEXT_BYTES,
};
pub use self::requests::{
    derived_memory_id, AddOutcome, AddRequest, AddedMemory, ExtractionSettings, ListPage, ListRequest, NumberedPage,
    SearchMode, SearchOutcome, SearchRequest, SourceInput, UpdateRequest, MAX_MEMORIES_PER_ADD,
};
pub use self::transfer::{
    ExportEnd, ExportHeader, ExportLine, ExportPage, ExportedMemory, ImportOutcome, EXPORT_FORMAT, EXPORT_VERSION,
    MAX_IMPORTED_HISTORY,
};
pub use self::writes::FailPoint;
use crate::decay::{DecayConfig, MemoryRead, ReadSink};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::history::{
    AuditAction, AuditEvent, AuditSink, Event, EventKind, EventSink, HistoryStore, LlmCall, UsageSink,
};
use crate::policy::{Checked, Policy};
use crate::providers::embedder::Embedder;
use crate::providers::llm::Llm;
use crate::providers::reranker::Reranker;
use crate::retrieval::{RetrievalSettings, Retriever};
use crate::scope::{Caller, Role, Scope};
use crate::store::{Cursor, ScopedQuery, VectorStore};
use crate::types::{HistoryEvent, HistoryRecord, MemoryItem, MemoryRecord};

/// The memory service.
#[derive(Clone)]
pub struct Memory {
    store: Arc<dyn VectorStore>,
    history: HistoryStore,
    embedder: Arc<dyn Embedder>,
    llm: Option<Arc<dyn Llm>>,
    extraction: ExtractionSettings,
    retriever: Retriever,
    reranker: Option<Arc<dyn Reranker>>,
    rerank_candidates: usize,
    policy: Arc<Policy>,
    /// Where reads, changes and policy decisions are reported; `None` records nothing.
    audit: Option<Arc<dyn AuditSink>>,
    /// Where reads of memories are reported for decay by use; `None` records nothing.
    reads: Option<Arc<dyn ReadSink>>,
    /// Where LLM calls are reported for token accounting; `None` records nothing.
    usage: Option<Arc<dyn UsageSink>>,
    /// Where each stored change (`memory.added`, `.updated`, `.deleted`) is reported for the
    /// tenant's webhooks; `None` reports nothing.
    events: Option<Arc<dyn EventSink>>,
    /// Which tenants' searches apply decay by use, and how fast memories fade.
    decay: DecayConfig,
    /// Called at the named steps of every write (crash drills in tests); `None` in production.
    fail_point: Option<FailPoint>,
    /// Journal entries of the writes this process is committing: recovery leaves them alone.
    writing: Arc<std::sync::Mutex<HashSet<Uuid>>>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("store", &self.store)
            .field("embedder", &self.embedder.model_id())
            .field("llm", &self.llm.as_ref().map(|llm| llm.model().to_owned()))
            .field("retrieval", self.retriever.settings())
            .finish_non_exhaustive()
    }
}

impl Memory {
    /// Builds the service and checks the store's embedding dimension against the embedder's. The
    /// store and embedder are wrapped in the decorators of [`crate::metrics`].
    ///
    /// # Errors
    /// [`Error::Config`] on a dimension mismatch; store errors.
    pub async fn new(store: Arc<dyn VectorStore>, history: HistoryStore, embedder: Arc<dyn Embedder>) -> Result<Self> {
        // Every store operation and embedding batch is timed for `/metrics`.
        let store = crate::metrics::ObservedStore::wrap(store);
        let embedder = crate::metrics::ObservedEmbedder::wrap(embedder);
        store.ensure_dimension(embedder.dimension(), embedder.model_id()).await?;
        let retriever = Retriever::new(Arc::clone(&store), Arc::clone(&embedder), RetrievalSettings::default());
        Ok(Self {
            store,
            history,
            embedder,
            llm: None,
            extraction: ExtractionSettings::default(),
            retriever,
            reranker: None,
            rerank_candidates: 30,
            policy: Arc::new(Policy::default()),
            audit: None,
            reads: None,
            usage: None,
            events: None,
            decay: DecayConfig::default(),
            fail_point: None,
            writing: Arc::default(),
        })
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
        self.retriever = Retriever::new(Arc::clone(&self.store), Arc::clone(&self.embedder), retrieval);
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

    /// Returns the service with `policy` checking every text before it is stored.
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// Returns the service reporting every read of a memory, every change and every write-policy
    /// decision to `sink` (the audit trail).
    #[must_use]
    pub fn with_audit(mut self, sink: Option<Arc<dyn AuditSink>>) -> Self {
        self.audit = sink;
        self
    }

    /// Returns the service reporting every read of a memory (by id, or as a search hit) to `sink`,
    /// for decay by use.
    #[must_use]
    pub fn with_reads(mut self, sink: Option<Arc<dyn ReadSink>>) -> Self {
        self.reads = sink;
        self
    }

    /// Returns the service reporting every LLM call it makes (with its tenant, model, purpose and
    /// tokens) to `sink`, for token accounting.
    #[must_use]
    pub fn with_usage(mut self, sink: Option<Arc<dyn UsageSink>>) -> Self {
        self.usage = sink;
        self
    }

    /// Reports one LLM call made for `tenant`.
    fn note_llm_call(
        &self,
        tenant: &str,
        provider: &str,
        model: &str,
        purpose: &str,
        usage: crate::providers::llm::TokenUsage,
    ) {
        crate::metrics::core().llm_call(tenant, model, purpose, usage.prompt_tokens, usage.completion_tokens);
        if let Some(sink) = &self.usage {
            sink.record(vec![LlmCall {
                tenant: tenant.to_owned(),
                at: Utc::now(),
                provider: provider.to_owned(),
                model: model.to_owned(),
                purpose: purpose.to_owned(),
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
            }]);
        }
    }

    /// Returns the service reporting every change it stores to `sink` (for webhooks).
    #[must_use]
    pub fn with_events(mut self, sink: Option<Arc<dyn EventSink>>) -> Self {
        self.events = sink;
        self
    }

    /// Reports the changes of a committed write: one event per history entry (the write's
    /// status changes, which have none, report nothing).
    fn publish_changes(&self, entries: &[HistoryRecord]) {
        let Some(sink) = &self.events else { return };
        let events: Vec<Event> = entries
            .iter()
            .map(|entry| {
                let kind = match entry.event {
                    HistoryEvent::Add => EventKind::MemoryAdded,
                    HistoryEvent::Update => EventKind::MemoryUpdated,
                    HistoryEvent::Delete => EventKind::MemoryDeleted,
                };
                let data = serde_json::json!({
                    "memory_id": entry.memory_id,
                    "event": entry.event.as_str(),
                    "memory": entry.new_memory,
                    "old_memory": entry.old_memory,
                    "user_id": entry.scope.user_id,
                    "agent_id": entry.scope.agent_id,
                    "run_id": entry.scope.run_id,
                    "actor_id": entry.actor_id,
                    "role": entry.role,
                    "updated_at": entry.updated_at,
                });
                Event { id: Uuid::now_v7(), tenant: entry.tenant.clone(), kind, at: entry.created_at, data }
            })
            .collect();
        if !events.is_empty() {
            sink.publish(events);
        }
    }

    /// Returns the service with these decay settings.
    #[must_use]
    pub fn with_decay(mut self, decay: DecayConfig) -> Self {
        self.decay = decay;
        self
    }

    /// Reports reads of `memory_ids` by `caller` now (nothing when there are none).
    fn note_reads<I: IntoIterator<Item = Uuid>>(&self, caller: &Caller, memory_ids: I) {
        if let Some(sink) = &self.reads {
            let at = Utc::now();
            let reads: Vec<MemoryRead> = memory_ids
                .into_iter()
                .map(|memory_id| MemoryRead { tenant: caller.tenant.clone(), memory_id, at })
                .collect();
            if !reads.is_empty() {
                sink.record(reads);
            }
        }
    }

    /// Reports that `caller` did `action` to each of `memory_ids` (nothing when there are none).
    fn audit<I: IntoIterator<Item = Uuid>>(&self, caller: &Caller, action: AuditAction, memory_ids: I) {
        if let Some(sink) = &self.audit {
            let events: Vec<AuditEvent> =
                memory_ids.into_iter().map(|id| AuditEvent::of(caller, action, Some(id), None)).collect();
            if !events.is_empty() {
                sink.record(events);
            }
        }
    }

    /// Reports an event about no single memory (a reset, a policy decision).
    fn audit_event(&self, caller: &Caller, action: AuditAction, detail: Option<String>) {
        if let Some(sink) = &self.audit {
            sink.record(vec![AuditEvent::of(caller, action, None, detail)]);
        }
    }

    /// Checks `text` of the caller's tenant against the write policy: the text to store
    /// (redacted where a rule says so), or [`Error::PolicyRejected`] naming `field`. Every
    /// redaction and refusal goes to the audit trail (rule or kinds and field, never the text).
    pub(crate) fn screen(&self, caller: &Caller, field: &str, text: &str) -> Result<(String, Vec<String>)> {
        match self.policy.check(&caller.tenant, text) {
            Checked::Store { text, redacted } => {
                if !redacted.is_empty() {
                    let detail = format!("{} in {field}", redacted.join(", "));
                    self.audit_event(caller, AuditAction::PolicyRedact, Some(detail));
                }
                Ok((text, redacted))
            }
            Checked::Rejected { rule } => {
                self.audit_event(caller, AuditAction::PolicyReject, Some(format!("{rule} in {field}")));
                Err(Error::PolicyRejected { field: field.to_owned(), rule })
            }
        }
    }

    /// Returns the reranker in use, when one is configured.
    pub fn reranker(&self) -> Option<&Arc<dyn Reranker>> {
        self.reranker.as_ref()
    }

    /// Returns the hybrid-search settings in use.
    pub fn retrieval(&self) -> &RetrievalSettings {
        self.retriever.settings()
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
        let embedder = crate::metrics::ObservedEmbedder::wrap(embedder);
        self.store.ensure_dimension(embedder.dimension(), embedder.model_id()).await?;
        let retriever = Retriever::new(Arc::clone(&self.store), Arc::clone(&embedder), *self.retriever.settings());
        Ok(Self { embedder, retriever, ..self.clone() })
    }

    /// Returns the history volume (history, message buffer, API keys, request log).
    pub fn history_store(&self) -> &HistoryStore {
        &self.history
    }

    /// Returns the memory store (for the parts of the server that write beside the service, such as
    /// the batched read log).
    pub fn store(&self) -> &Arc<dyn VectorStore> {
        &self.store
    }

    /// Returns the embedder in use.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// Returns one memory. Expired memories are returned too.
    ///
    /// # Errors
    /// [`Error::MemoryNotFound`] when missing or outside the caller's reach.
    #[instrument(skip_all, fields(tenant = %caller.tenant, memory_id = %id))]
    pub async fn get(&self, caller: &Caller, id: Uuid) -> Result<MemoryItem> {
        caller.require(Role::Read)?;
        let record = self.visible(caller, id).await?;
        self.audit(caller, AuditAction::Get, [id]);
        self.note_reads(caller, [id]);
        Ok(record.into())
    }

    /// Lists memories of a scope, newest first, one page at a time.
    ///
    /// # Errors
    /// Validation (page size, cursor), scope errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant, page_size = request.page_size))]
    pub async fn list(&self, caller: &Caller, request: ListRequest) -> Result<ListPage> {
        check_listing(caller, &request)?;
        let cursor = request.cursor.as_deref().map(Cursor::decode).transpose()?;
        let mut query = self.scoped_query(caller, request.scope, request.filter, request.show_expired);
        query.include_superseded = request.include_superseded;
        let page = self.store.list(&query, cursor, request.page_size).await?;
        self.audit(caller, AuditAction::List, page.records.iter().map(|record| record.id));
        Ok(ListPage {
            items: page.records.into_iter().map(MemoryItem::from).collect(),
            next: page.next.map(|cursor| cursor.encode()),
        })
    }

    /// Lists memories of a scope like [`Memory::list`], by page number (1 is the first) rather
    /// than cursor, with the number of matching memories: the paging of Mem0's API. `request`
    /// must not carry a cursor.
    ///
    /// # Errors
    /// Validation (page, page size, a cursor given), scope errors.
    #[instrument(skip_all, fields(tenant = %caller.tenant, page, page_size = request.page_size))]
    pub async fn list_numbered(&self, caller: &Caller, request: ListRequest, page: usize) -> Result<NumberedPage> {
        check_listing(caller, &request)?;
        if request.cursor.is_some() {
            return Err(Error::validation("cursor", "a numbered page takes no cursor"));
        }
        let offset = page
            .checked_sub(1)
            .and_then(|before| before.checked_mul(request.page_size))
            .filter(|offset| i64::try_from(*offset).is_ok())
            .ok_or_else(|| Error::validation("page", "must be a page number from 1"))?;
        let mut query = self.scoped_query(caller, request.scope, request.filter, request.show_expired);
        query.include_superseded = request.include_superseded;
        let count = self.store.count(&query).await?;
        let records = if (offset as u64) < count {
            self.store.list_at(&query, offset, request.page_size).await?
        } else {
            Vec::new()
        };
        self.audit(caller, AuditAction::List, records.iter().map(|record| record.id));
        Ok(NumberedPage { items: records.into_iter().map(MemoryItem::from).collect(), count })
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
        self.audit(caller, AuditAction::History, [id]);
        Ok(entries)
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
        ScopedQuery {
            tenant: caller.tenant.clone(),
            scope,
            filter,
            show_expired,
            today: Utc::now().date_naive(),
            include_superseded: false,
            fresh_since: None,
        }
    }
}

/// What every listing checks: the caller may read, an empty scope (the whole tenant) is for
/// admins, the scope is the caller's, the page size is in bounds.
fn check_listing(caller: &Caller, request: &ListRequest) -> Result<()> {
    caller.require(Role::Read)?;
    if request.scope.is_empty() {
        caller
            .require(Role::Admin)
            .map_err(|_| Error::Forbidden("listing without user_id, agent_id or run_id needs the admin role".into()))?;
    }
    caller.check_scope(&request.scope)?;
    check_bound("page_size", request.page_size)
}
