//! Configuration of the memory library: which embedder and stores to build.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::decay::DecayConfig;
use crate::error::Result;
use crate::history::HistoryStore;
use crate::memory::{ExtractionSettings, Memory};
use crate::policy::{Policy, PolicyConfig};
use crate::providers::embedder::{build_embedder, Embedder, EmbedderConfig};
use crate::providers::llm::{build_llm, LlmConfig};
use crate::providers::reranker::{build_reranker, RerankerConfig};
use crate::retrieval::RetrievalSettings;
use crate::store::{PgVectorConfig, PgVectorStore, SqliteStore, VectorStore};

/// Everything needed to build a [`Memory`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// The embedder.
    pub embedder: EmbedderConfig,
    /// Where memories and their embeddings live.
    pub vector_store: VectorStoreConfig,
    /// Where history and the message buffer live.
    pub history: HistoryConfig,
    /// The LLM that extracts facts (`infer=true`) and writes procedural memories.
    #[serde(default)]
    pub llm: LlmConfig,
    /// How the extraction prompt is built.
    #[serde(default)]
    pub extraction: ExtractionSettings,
    /// How hybrid search weighs its signals.
    #[serde(default)]
    pub retrieval: RetrievalSettings,
    /// The reranker used by searches with `rerank: true`.
    #[serde(default)]
    pub reranker: RerankerConfig,
    /// What must never be stored (see [`crate::policy`]).
    #[serde(default)]
    pub policy: PolicyConfig,
    /// Decay by use (see [`crate::decay`]).
    #[serde(default)]
    pub decay: DecayConfig,
}

/// Which vector store to use; settings of every provider may be present, `provider` picks one.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorStoreConfig {
    /// The store in use.
    pub provider: VectorStoreProvider,
    /// Settings of the embedded SQLite store.
    #[serde(default)]
    pub sqlite: SqliteStoreConfig,
    /// Settings of the Postgres + pgvector store.
    #[serde(default)]
    pub pgvector: PgVectorConfig,
}

/// The vector store providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorStoreProvider {
    /// The embedded store: one SQLite file, no external service.
    Sqlite,
    /// Postgres with pgvector: the production store.
    Pgvector,
}

/// Settings of the embedded SQLite store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqliteStoreConfig {
    /// Path of the database file.
    pub path: PathBuf,
    /// Most memories the per-scope search indexes hold together (each costs its embedding, 4
    /// bytes a dimension, plus its postings and links); also bounds the embeddings cached for
    /// scopes too large to index. 0: no indexes, every search through SQL.
    #[serde(default = "default_vector_cache_entries")]
    pub vector_cache_entries: usize,
    /// Most memory rows kept in memory for search (a row is its embedding, texts and metadata:
    /// about 3 KB for a short fact at 384 dimensions, about 8 KB for a 3,000-character memory).
    #[serde(default = "default_record_cache_entries")]
    pub record_cache_entries: usize,
}

fn default_vector_cache_entries() -> usize {
    crate::store::DEFAULT_VECTOR_CACHE_ENTRIES
}

fn default_record_cache_entries() -> usize {
    crate::store::DEFAULT_RECORD_CACHE_ENTRIES
}

impl Default for SqliteStoreConfig {
    fn default() -> Self {
        Self {
            path: "data/memories.db".into(),
            vector_cache_entries: default_vector_cache_entries(),
            record_cache_entries: default_record_cache_entries(),
        }
    }
}

/// Where history, the conversation buffer, API keys, the request log and the runtime
/// configuration live.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// The SQLite history volume, or the Postgres database of the pgvector store.
    #[serde(default)]
    pub provider: HistoryProvider,
    /// Path of the history database file (provider `sqlite`).
    #[serde(default = "default_history_path")]
    pub path: PathBuf,
}

fn default_history_path() -> PathBuf {
    "data/history.db".into()
}

/// The history providers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryProvider {
    /// A SQLite file on the server's volume (one server per volume).
    #[default]
    Sqlite,
    /// Tables in the pgvector store's database: writes commit their history in their own
    /// transaction, and every replica on the database shares it.
    Postgres,
}

impl MemoryConfig {
    /// Checks every section: one set of rules for startup and runtime changes.
    ///
    /// # Errors
    /// A message naming the bad key (under `prefix`, e.g. `memory`).
    pub fn validate(&self, prefix: &str) -> std::result::Result<(), String> {
        self.embedder.validate(&format!("{prefix}.embedder"))?;
        self.llm.validate(&format!("{prefix}.llm"))?;
        self.extraction.validate(&format!("{prefix}.extraction"))?;
        self.retrieval.validate().map_err(|message| format!("{prefix}.{message}"))?;
        if self.history.provider == HistoryProvider::Postgres
            && self.vector_store.provider != VectorStoreProvider::Pgvector
        {
            return Err(format!(
                "{prefix}.history.provider = \"postgres\" keeps the history in the pgvector store's database: \
                 set {prefix}.vector_store.provider = \"pgvector\" too, or use the \"sqlite\" history"
            ));
        }
        self.reranker.validate(&format!("{prefix}.reranker"))?;
        self.decay.validate(&format!("{prefix}.decay"))?;
        Policy::compile(&self.policy).map(|_| ())
    }
}

impl Memory {
    /// Builds the embedder and stores from `config`, then the service ([`Memory::assemble`]).
    ///
    /// # Errors
    /// [`crate::Error::Config`] for invalid settings, a model that cannot load or a dimension
    /// mismatch; store errors.
    pub async fn from_config(config: &MemoryConfig) -> Result<Self> {
        config.validate("memory").map_err(crate::Error::Config)?;
        let embedder = build_embedder(&config.embedder).await?;
        let (store, history): (Arc<dyn VectorStore>, HistoryStore) = match config.vector_store.provider {
            VectorStoreProvider::Sqlite => {
                let sqlite = &config.vector_store.sqlite;
                let store = SqliteStore::open_with_caches(
                    &sqlite.path,
                    sqlite.vector_cache_entries,
                    sqlite.record_cache_entries,
                )
                .await?;
                (Arc::new(store), HistoryStore::open(&config.history.path).await?)
            }
            VectorStoreProvider::Pgvector => {
                let pgvector = &config.vector_store.pgvector;
                let url = pgvector.url.as_ref().ok_or_else(|| {
                    crate::Error::Config("memory.vector_store.pgvector.url is not set (or set DATABASE_URL)".to_owned())
                })?;
                let store = PgVectorStore::connect(secrecy::ExposeSecret::expose_secret(url), pgvector).await?;
                let history = match config.history.provider {
                    HistoryProvider::Postgres => HistoryStore::in_postgres(&store),
                    HistoryProvider::Sqlite => HistoryStore::open(&config.history.path).await?,
                };
                (Arc::new(store), history)
            }
        };
        Self::assemble(store, history, embedder, config).await
    }

    /// The one place a service is put together from its stores, its embedder and the rest of
    /// `config` (LLM, reranker, extraction and retrieval settings): at startup, by tests with
    /// stores of their own, and (through [`Memory::reconfigure`]) when settings change at runtime.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for invalid settings or a dimension mismatch; store errors.
    pub async fn assemble(
        store: Arc<dyn VectorStore>,
        history: HistoryStore,
        embedder: Arc<dyn Embedder>,
        config: &MemoryConfig,
    ) -> Result<Self> {
        Memory::new(store, history, embedder).await?.reconfigure(None, config).await
    }

    /// The service with the providers and settings of `config` (the stores stay): a new
    /// `embedder` when given (its dimension checked against the store), the LLM, reranker,
    /// extraction and retrieval settings built from `config`.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for invalid settings or a dimension mismatch; store errors.
    pub async fn reconfigure(&self, embedder: Option<Arc<dyn Embedder>>, config: &MemoryConfig) -> Result<Self> {
        config.validate("memory").map_err(crate::Error::Config)?;
        let base = match embedder {
            Some(embedder) => self.with_embedder(embedder).await?,
            None => self.clone(),
        };
        let llm = build_llm(&config.llm)?;
        let reranker = build_reranker(&config.reranker, llm.as_ref())?;
        let policy = Policy::compile(&config.policy).map_err(crate::Error::Config)?;
        Ok(base
            .with_policy(policy)
            .with_decay(config.decay.clone())
            .with_llm(llm, config.extraction.clone())
            .with_retrieval(config.retrieval)
            .with_reranker(reranker, config.reranker.candidates))
    }
}
