//! mem0-core: long-term memory for AI agents as a library.
//!
//! [`Memory`] is the service (add, get, list, search, update, delete, delete_all, history, reset);
//! every operation takes a [`Caller`] whose tenant and scope grant the core enforces. Memories live
//! behind the [`store::VectorStore`] traits (the embedded SQLite store or Postgres + pgvector), the
//! history, conversation buffer, request log, API keys and idempotency keys in
//! [`history::HistoryStore`] (a SQLite file, or the Postgres database of the store); embeddings,
//! LLM calls and reranking come from [`providers`].

pub mod analysis;
pub mod api_keys;
pub mod config;
pub mod decay;
pub mod entities;
pub mod error;
pub mod extraction;
pub mod filter;
pub mod history;
pub mod memory;
pub mod metrics;
pub mod policy;
pub mod providers;
pub mod retrieval;
pub mod scope;
pub mod state;
pub mod store;
pub mod temporal;
pub mod text;
pub mod types;

pub use config::{
    HistoryConfig, HistoryProvider, MemoryConfig, SqliteStoreConfig, VectorStoreConfig, VectorStoreProvider,
};
pub use error::{Error, ProviderError, ProviderErrorKind, Result};
pub use memory::{
    AddOutcome, AddRequest, AddedMemory, ExtractionSettings, ListPage, ListRequest, Memory, SearchRequest,
    UpdateRequest,
};
pub use scope::{Caller, Role, Scope, ScopeGrant};
pub use types::{HistoryEvent, HistoryRecord, MemoryItem, Message, Metadata};
