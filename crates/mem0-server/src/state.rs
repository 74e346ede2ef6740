//! Shared application state, handed to handlers with `State`.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use mem0_core::api_keys::ApiKeys;
use mem0_core::history::{AuditLog, RequestLog};
use mem0_core::{Caller, Memory};

use crate::auth::Authenticator;
use crate::background_log::{AuditWriter, ReadWriter, RequestLogWriter, UsageWriter};
use crate::config::Settings;
use crate::error::{ApiError, ErrorCode};
use crate::rate_limit::Limits;

/// The memory service in effect; `POST /configure` swaps it atomically.
#[derive(Debug)]
pub struct MemoryHandle {
    current: std::sync::RwLock<Arc<Memory>>,
    /// Serialises configuration changes; holds the runtime settings in effect.
    pub runtime: tokio::sync::Mutex<crate::configure::RuntimeConfig>,
    /// Version of the shared runtime configuration in effect (history on Postgres; 0: none).
    pub config_version: std::sync::atomic::AtomicI64,
    /// Why the newest shared runtime configuration is not in effect, when it is not.
    pub config_problem: std::sync::RwLock<Option<String>>,
}

impl MemoryHandle {
    /// Wraps the service built from `runtime`.
    pub fn new(memory: Memory, runtime: crate::configure::RuntimeConfig) -> Self {
        Self {
            current: std::sync::RwLock::new(Arc::new(memory)),
            runtime: tokio::sync::Mutex::new(runtime),
            config_version: std::sync::atomic::AtomicI64::new(0),
            config_problem: std::sync::RwLock::new(None),
        }
    }

    /// Returns the service in effect.
    pub fn get(&self) -> Arc<Memory> {
        Arc::clone(&self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Puts `memory` in effect for every request that starts from now on.
    pub fn swap(&self, memory: Memory) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(memory);
    }
}

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The memory service (swappable).
    pub memory_handle: Arc<MemoryHandle>,
    /// The loaded settings.
    pub settings: Arc<Settings>,
    /// Turns credentials into callers.
    pub auth: Arc<Authenticator>,
    /// Rate limits (`None` when switched off).
    pub limits: Option<Arc<dyn Limits>>,
    /// Where request log entries go (written in the background).
    pub request_log: RequestLogWriter,
    /// The request log, to read (admins).
    pub requests: RequestLog,
    /// Where the memory service reports audit events (tests flush it before reading).
    pub audit: AuditWriter,
    /// The audit trail, to read (admins).
    pub audit_log: AuditLog,
    /// Where the memory service reports reads (tests flush it before searching with decay).
    pub reads: ReadWriter,
    /// Where the memory service reports LLM calls (token accounting).
    pub usage: UsageWriter,
    /// The API keys.
    pub api_keys: ApiKeys,
    /// Set when a shutdown began: `/ready` answers 503 `draining` from then on.
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    /// Queued adds.
    pub jobs: crate::jobs::JobQueue,
    /// Webhooks, and where events are reported for them.
    pub webhooks: crate::webhooks::WebhookService,
}

impl AppState {
    /// Returns the memory service in effect.
    pub fn memory(&self) -> Arc<Memory> {
        self.memory_handle.get()
    }
}

/// The caller of the current request, established by the guard middleware; the core checks every
/// operation against it.
#[derive(Debug, Clone)]
pub struct RequestCaller(pub Caller);

impl FromRequestParts<AppState> for RequestCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &AppState) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .map(Self)
            .ok_or_else(|| ApiError::new(ErrorCode::Unauthenticated, "authentication required"))
    }
}
