//! mem0-core: long-term memory for AI agents as a library.
//!
//! [`Memory`] is the service (add, get, list, search, update, delete, delete_all, history, reset);
//! every operation takes a [`Caller`] whose tenant and scope grant the core enforces. Storage sits
//! behind [`store::VectorStore`] (embedded SQLite today) with the SQLite [`history::HistoryStore`]
//! beside it; embeddings come from [`providers::embedder::Embedder`] implementations.

pub mod analysis;
pub mod auth;
pub mod config;
pub mod entities;
pub mod error;
pub mod extraction;
pub mod filter;
pub mod history;
pub mod memory;
pub mod providers;
pub mod retrieval;
pub mod scope;
pub mod store;
pub mod text;
pub mod types;

pub use config::{HistoryConfig, MemoryConfig, SqliteStoreConfig, VectorStoreConfig, VectorStoreProvider};
pub use error::{Error, ProviderError, ProviderErrorKind, Result};
pub use memory::{
    AddOutcome, AddRequest, AddedMemory, ExtractionSettings, ListPage, ListRequest, Memory, SearchRequest,
    UpdateRequest,
};
pub use scope::{Caller, Role, Scope, ScopeGrant};
pub use types::{HistoryEvent, HistoryRecord, MemoryItem, Message, Metadata};
