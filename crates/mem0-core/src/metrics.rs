//! Prometheus metrics of the core: provider calls (LLM, reranker, remote embedder), LLM tokens,
//! embedding batches and store operations.
//!
//! The families live for the process, as Prometheus expects of a service (one server per
//! process); the server registers them beside its own and serves them at `/metrics`. Every
//! label value comes from a closed set (provider, service and store names, operations, error
//! kinds) or from configuration and authentication (model names, tenants), never from a
//! request's data, so the number of series stays bounded.
//!
//! The decorators [`ObservedStore`] and [`ObservedEmbedder`] time every store operation and
//! embedding batch, each in a tracing span of its own (`store`, `embed`: the children of a
//! request's span in its trace); [`crate::Memory::new`] puts them around the store and embedder it is given,
//! so every path (requests, queued adds, imports, sweeps) is measured the same way.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use tracing::Instrument as _;
use uuid::Uuid;

use crate::error::{ProviderError, Result};
use crate::providers::embedder::Embedder;
use crate::store::{
    AccessLog, Applied, Cursor, EntityCandidates, EntityHit, EntityIndex, EntityProbe, Journal, JournalEntry,
    KeywordCandidates, KeywordIndex, MemoryRows, Page, ScopeKind, ScopeSummary, ScopedQuery, ScoredRecord, VectorIndex,
    VectorStore, WriteSet,
};
use crate::types::MemoryRecord;

/// A family of histograms built with one set of buckets.
pub type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets in seconds: 0.5 ms to ~33 s, doubling.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

/// Batch-size buckets: 1 to 512 texts, doubling.
fn batch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 10))
}

/// One attempt of a call to an external provider.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// The provider (`openai`, `anthropic`, `reranker`, `openai-embedder`).
    pub provider: &'static str,
    /// What it was called for: `llm`, `rerank` or `embed`.
    pub service: &'static str,
}

/// The outcome of a provider attempt.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderOutcome {
    /// The provider.
    pub provider: &'static str,
    /// `llm`, `rerank` or `embed`.
    pub service: &'static str,
    /// `ok`, or the error kind (`provider_rate_limited`, `provider_timeout`, …).
    pub outcome: &'static str,
}

/// LLM calls per tenant, model and purpose.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LlmCallLabels {
    /// The tenant the call was made for.
    pub tenant: String,
    /// The model.
    pub model: String,
    /// `extraction`, `procedural` or `rerank`.
    pub purpose: String,
}

/// LLM tokens per tenant, model and direction.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// The tenant.
    pub tenant: String,
    /// The model.
    pub model: String,
    /// `prompt` or `completion`.
    pub r#type: &'static str,
}

/// Embedding batches per model.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EmbedderLabels {
    /// The embedding model.
    pub model: String,
}

/// Embedding calls per model and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EmbedderOutcome {
    /// The embedding model.
    pub model: String,
    /// `ok` or the error kind.
    pub outcome: &'static str,
}

/// Store operations per store and operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    /// `sqlite` or `pgvector`.
    pub store: &'static str,
    /// The operation (`apply`, `search`, `keyword_candidates`, …).
    pub operation: &'static str,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// The core's metric families.
#[derive(Debug)]
pub struct CoreMetrics {
    provider_requests: Family<ProviderOutcome, Counter>,
    provider_duration: Histograms<ProviderLabels>,
    provider_retries: Family<ProviderLabels, Counter>,
    llm_calls: Family<LlmCallLabels, Counter>,
    llm_tokens: Family<TokenLabels, Counter>,
    embedding_calls: Family<EmbedderOutcome, Counter>,
    embedding_texts: Histograms<EmbedderLabels>,
    embedding_duration: Histograms<EmbedderLabels>,
    store_duration: Histograms<StoreLabels>,
}

static METRICS: LazyLock<CoreMetrics> = LazyLock::new(|| CoreMetrics {
    provider_requests: Family::default(),
    provider_duration: Family::new_with_constructor(latency_histogram),
    provider_retries: Family::default(),
    llm_calls: Family::default(),
    llm_tokens: Family::default(),
    embedding_calls: Family::default(),
    embedding_texts: Family::new_with_constructor(batch_histogram),
    embedding_duration: Family::new_with_constructor(latency_histogram),
    store_duration: Family::new_with_constructor(latency_histogram),
});

/// The process's core metrics.
pub fn core() -> &'static CoreMetrics {
    &METRICS
}

impl CoreMetrics {
    /// Adds the families to `registry` (under its prefix, e.g. `mem0_`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "provider_requests",
            "Attempts of calls to external providers, by provider, service and outcome",
            self.provider_requests.clone(),
        );
        registry.register_with_unit(
            "provider_request_duration",
            "Duration of each attempt of a provider call",
            Unit::Seconds,
            self.provider_duration.clone(),
        );
        registry.register(
            "provider_retries",
            "Provider calls attempted again after a transient failure",
            self.provider_retries.clone(),
        );
        registry.register("llm_calls", "LLM calls by tenant, model and purpose", self.llm_calls.clone());
        registry.register(
            "llm_tokens",
            "LLM tokens the provider reported, by tenant, model and type (prompt, completion)",
            self.llm_tokens.clone(),
        );
        registry.register("embedding_calls", "Embedding batches by model and outcome", self.embedding_calls.clone());
        registry.register("embedding_batch_texts", "Texts per embedding batch", self.embedding_texts.clone());
        registry.register_with_unit(
            "embedding_duration",
            "Duration of an embedding batch",
            Unit::Seconds,
            self.embedding_duration.clone(),
        );
        registry.register_with_unit(
            "store_operation_duration",
            "Duration of memory-store operations, by store, operation and outcome",
            Unit::Seconds,
            self.store_duration.clone(),
        );
    }

    /// Records one attempt of a provider call.
    pub fn provider_attempt(
        &self,
        provider: &'static str,
        service: &'static str,
        outcome: std::result::Result<(), &ProviderError>,
        took: Duration,
    ) {
        let outcome = outcome.map_or_else(|error| error.kind.code(), |()| "ok");
        self.provider_requests.get_or_create(&ProviderOutcome { provider, service, outcome }).inc();
        self.provider_duration.get_or_create(&ProviderLabels { provider, service }).observe(took.as_secs_f64());
    }

    /// Records that a provider call is attempted again.
    pub fn provider_retry(&self, provider: &'static str, service: &'static str) {
        self.provider_retries.get_or_create(&ProviderLabels { provider, service }).inc();
    }

    /// Records one LLM call made for `tenant`, with the tokens the provider reported.
    pub fn llm_call(&self, tenant: &str, model: &str, purpose: &str, prompt_tokens: u64, completion_tokens: u64) {
        let (tenant, model) = (tenant.to_owned(), model.to_owned());
        self.llm_calls
            .get_or_create(&LlmCallLabels { tenant: tenant.clone(), model: model.clone(), purpose: purpose.to_owned() })
            .inc();
        let tokens = |r#type| TokenLabels { tenant: tenant.clone(), model: model.clone(), r#type };
        self.llm_tokens.get_or_create(&tokens("prompt")).inc_by(prompt_tokens);
        self.llm_tokens.get_or_create(&tokens("completion")).inc_by(completion_tokens);
    }

    fn embedding(&self, model: &str, texts: usize, outcome: std::result::Result<(), &ProviderError>, took: Duration) {
        let outcome = outcome.map_or_else(|error| error.kind.code(), |()| "ok");
        let labels = EmbedderLabels { model: model.to_owned() };
        self.embedding_calls.get_or_create(&EmbedderOutcome { model: labels.model.clone(), outcome }).inc();
        self.embedding_texts.get_or_create(&labels).observe(texts as f64);
        self.embedding_duration.get_or_create(&labels).observe(took.as_secs_f64());
    }

    fn store_operation(&self, store: &'static str, operation: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.store_duration.get_or_create(&StoreLabels { store, operation, outcome }).observe(took.as_secs_f64());
    }
}

/// Connections of a database pool, read when metrics are scraped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    /// Open connections (in use or idle).
    pub size: u32,
    /// Idle connections.
    pub idle: u32,
    /// The most the pool opens.
    pub max: u32,
}

impl PoolStatus {
    /// The status of a sqlx pool.
    pub fn of<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> Self {
        Self {
            size: pool.size(),
            idle: u32::try_from(pool.num_idle()).unwrap_or(u32::MAX),
            max: pool.options().get_max_connections(),
        }
    }
}

/// A store whose every operation is timed into `mem0_store_operation_duration_seconds`.
#[derive(Debug)]
pub struct ObservedStore {
    inner: Arc<dyn VectorStore>,
    name: &'static str,
}

impl ObservedStore {
    /// Wraps `inner`.
    pub fn wrap(inner: Arc<dyn VectorStore>) -> Arc<dyn VectorStore> {
        let name = inner.backend();
        Arc::new(Self { inner, name })
    }

    async fn timed<T>(&self, operation: &'static str, run: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        // At debug: the log (info) pays nothing for a span per store operation; the trace
        // exporter takes mem0_core's debug spans.
        let span =
            tracing::debug_span!("store", otel.name = %format!("store {operation}"), store = self.name, operation);
        let started = Instant::now();
        let result = run.instrument(span).await;
        core().store_operation(self.name, operation, result.is_ok(), started.elapsed());
        result
    }
}

#[async_trait]
impl MemoryRows for ObservedStore {
    async fn apply(&self, write: &WriteSet) -> Result<Applied> {
        self.timed("apply", self.inner.apply(write)).await
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<MemoryRecord>> {
        self.timed("get", self.inner.get(tenant, id)).await
    }

    async fn get_many(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<MemoryRecord>> {
        self.timed("get_many", self.inner.get_many(tenant, ids)).await
    }

    async fn get_candidates(&self, query: &ScopedQuery, ids: &[Uuid]) -> Result<Vec<Arc<MemoryRecord>>> {
        self.timed("get_many", self.inner.get_candidates(query, ids)).await
    }

    async fn list(&self, query: &ScopedQuery, after: Option<Cursor>, page_size: usize) -> Result<Page> {
        self.timed("list", self.inner.list(query, after, page_size)).await
    }

    async fn list_at(&self, query: &ScopedQuery, offset: usize, limit: usize) -> Result<Vec<MemoryRecord>> {
        self.timed("list_at", self.inner.list_at(query, offset, limit)).await
    }

    async fn count(&self, query: &ScopedQuery) -> Result<u64> {
        self.timed("count", self.inner.count(query)).await
    }

    async fn scopes(
        &self,
        tenant: &str,
        kind: ScopeKind,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ScopeSummary>> {
        self.timed("scopes", self.inner.scopes(tenant, kind, after, limit)).await
    }

    async fn reset(&self, tenant: Option<&str>) -> Result<()> {
        self.timed("reset", self.inner.reset(tenant)).await
    }

    async fn unanalysed(&self, after: Option<Uuid>, limit: usize) -> Result<Vec<MemoryRecord>> {
        self.timed("unanalysed", self.inner.unanalysed(after, limit)).await
    }

    async fn ping(&self) -> Result<()> {
        self.timed("ping", self.inner.ping()).await
    }

    fn backend(&self) -> &'static str {
        self.name
    }

    fn pool_status(&self) -> PoolStatus {
        self.inner.pool_status()
    }
}

#[async_trait]
impl Journal for ObservedStore {
    async fn journal(&self, before: DateTime<Utc>, limit: usize) -> Result<Vec<JournalEntry>> {
        self.timed("journal", self.inner.journal(before, limit)).await
    }

    async fn settle(&self, ids: &[Uuid]) -> Result<()> {
        self.timed("settle", self.inner.settle(ids)).await
    }
}

#[async_trait]
impl VectorIndex for ObservedStore {
    async fn ensure_dimension(&self, dimension: usize, model_id: &str) -> Result<()> {
        self.timed("ensure_dimension", self.inner.ensure_dimension(dimension, model_id)).await
    }

    async fn search(
        &self,
        query: &ScopedQuery,
        vector: &[f32],
        limit: usize,
        threshold: f32,
    ) -> Result<Vec<ScoredRecord>> {
        self.timed("search", self.inner.search(query, vector, limit, threshold)).await
    }
}

#[async_trait]
impl KeywordIndex for ObservedStore {
    async fn keyword_candidates(
        &self,
        query: &ScopedQuery,
        terms: &[String],
        limit: usize,
    ) -> Result<KeywordCandidates> {
        self.timed("keyword_candidates", self.inner.keyword_candidates(query, terms, limit)).await
    }
}

#[async_trait]
impl EntityIndex for ObservedStore {
    async fn entity_candidates(
        &self,
        query: &ScopedQuery,
        probes: &[EntityProbe],
        threshold: f32,
        limit: usize,
    ) -> Result<EntityCandidates> {
        self.timed("entity_candidates", self.inner.entity_candidates(query, probes, threshold, limit)).await
    }

    async fn entity_links(
        &self,
        query: &ScopedQuery,
        matched: &[(String, Vec<usize>)],
        memory_ids: &[Uuid],
    ) -> Result<Vec<EntityHit>> {
        self.timed("entity_links", self.inner.entity_links(query, matched, memory_ids)).await
    }
}

#[async_trait]
impl AccessLog for ObservedStore {
    async fn record_reads(&self, reads: &[crate::decay::MemoryRead]) -> Result<()> {
        self.timed("record_reads", self.inner.record_reads(reads)).await
    }

    async fn last_reads(&self, tenant: &str, ids: &[Uuid]) -> Result<HashMap<Uuid, DateTime<Utc>>> {
        self.timed("last_reads", self.inner.last_reads(tenant, ids)).await
    }
}

/// An embedder whose every batch is counted and timed (`mem0_embedding_*`).
#[derive(Debug)]
pub struct ObservedEmbedder {
    inner: Arc<dyn Embedder>,
}

impl ObservedEmbedder {
    /// Wraps `inner`.
    pub fn wrap(inner: Arc<dyn Embedder>) -> Arc<dyn Embedder> {
        Arc::new(Self { inner })
    }
}

#[async_trait]
impl Embedder for ObservedEmbedder {
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    async fn embed_batch(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, ProviderError> {
        let span = tracing::debug_span!("embed", model = self.inner.model_id(), texts = texts.len());
        let started = Instant::now();
        let result = self.inner.embed_batch(texts).instrument(span).await;
        core().embedding(self.inner.model_id(), texts.len(), result.as_ref().map(|_| ()), started.elapsed());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_encode_in_the_prometheus_text_format() {
        let mut registry = Registry::with_prefix("mem0");
        core().register(&mut registry);
        core().llm_call("tenant-metrics-test", "model-x", "extraction", 800, 60);
        core().provider_retry("openai", "llm");
        core().store_operation("sqlite", "encode_test", true, Duration::from_millis(3));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).expect("encode");
        assert!(text
            .contains("mem0_llm_tokens_total{tenant=\"tenant-metrics-test\",model=\"model-x\",type=\"prompt\"} 800"));
        assert!(text.contains(
            "mem0_llm_tokens_total{tenant=\"tenant-metrics-test\",model=\"model-x\",type=\"completion\"} 60"
        ));
        assert!(text.contains("# TYPE mem0_store_operation_duration_seconds histogram"));
        // 3 ms falls in the bucket of 4 ms and above, not in that of 2 ms.
        assert!(text.contains(
            "mem0_store_operation_duration_seconds_bucket{store=\"sqlite\",operation=\"encode_test\",outcome=\"ok\",le=\"0.004\"} 1"
        ));
        assert!(text.contains(
            "mem0_store_operation_duration_seconds_bucket{store=\"sqlite\",operation=\"encode_test\",outcome=\"ok\",le=\"0.002\"} 0"
        ));
        assert!(text.contains("mem0_provider_retries_total{provider=\"openai\",service=\"llm\"}"));
    }
}
