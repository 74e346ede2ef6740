//! The core error type: what went wrong, and whose fault it was.

use std::time::Duration;

/// Result with the core [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a core operation can fail with. The server maps every variant to a status and a code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller sent something invalid; `field` names the offending input.
    #[error("invalid {field}: {message}")]
    Validation { field: String, message: String },
    /// The filter expression uses an operator we do not know.
    #[error("unsupported filter operator `{operator}`")]
    UnsupportedOperator { operator: String },
    /// The memory does not exist, or exists outside the caller's reach (never told apart).
    #[error("memory {id} not found")]
    MemoryNotFound { id: String },
    /// The API key does not exist, is revoked, or belongs to another tenant.
    #[error("api key {id} not found")]
    ApiKeyNotFound { id: String },
    /// The caller may not perform this operation on this scope.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A row changed between reading it and writing it (a guarded write was refused).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The write policy refuses to store `field`: rule `rule` (a detector kind or a rule name)
    /// matched it.
    #[error("{field} matches the write policy rule `{rule}`; nothing was stored")]
    PolicyRejected { field: String, rule: String },
    /// An embedding or LLM provider failed.
    #[error("{0}")]
    Provider(#[from] ProviderError),
    /// `infer=true` (or procedural memory) was asked for but no LLM is configured.
    #[error("no llm is configured: set OPENAI_API_KEY (or llm.* in the config) to extract facts, or send infer=false to store messages verbatim")]
    LlmNotConfigured,
    /// A store (vector store or history) could not be reached or failed.
    #[error("store unavailable: {0}")]
    StoreUnavailable(String),
    /// The stored data does not match the configuration (e.g. embedding dimensions).
    #[error("configuration error: {0}")]
    Config(String),
    /// A bug or an unexpected state; details are logged, not shown to callers.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Builds a validation error for `field`.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Validation { field: field.into(), message: message.into() }
    }
}

/// True for database error codes that mean "the store cannot serve now" rather than a bug.
/// Postgres SQLSTATEs have five characters: classes 08 (connection), 53 (insufficient resources),
/// 57 (operator intervention). SQLite codes are numbers whose low byte is the primary code:
/// BUSY 5, LOCKED 6, IOERR 10, FULL 13, CANTOPEN 14.
fn transient_database_code(code: &str) -> bool {
    if code.len() == 5 {
        return ["08", "53", "57"].iter().any(|class| code.starts_with(class));
    }
    code.parse::<u32>().is_ok_and(|value| matches!(value & 0xff, 5 | 6 | 10 | 13 | 14))
}

impl From<sqlx::Error> for Error {
    /// Connection-level failures (the store is down, busy or out of resources) are
    /// `StoreUnavailable` (503, worth retrying); anything else is a bug or corrupt state (500).
    fn from(error: sqlx::Error) -> Self {
        let unavailable = match &error {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(database) => database.code().is_some_and(|code| transient_database_code(&code)),
            _ => false,
        };
        if unavailable {
            Self::StoreUnavailable(error.to_string())
        } else {
            Self::Internal(format!("store error: {error}"))
        }
    }
}

/// The class of a provider failure; each has a stable code on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderErrorKind {
    /// The provider rejected our credentials (401/403).
    AuthFailed,
    /// The provider throttled us (429).
    RateLimited,
    /// The provider did not answer in time.
    Timeout,
    /// The provider could not be reached or failed on its side (5xx, connection refused).
    Unavailable,
    /// The provider rejected the request itself (400/404/422).
    BadRequest,
    /// The provider answered with something we cannot use.
    BadResponse,
}

impl ProviderErrorKind {
    /// Returns the stable snake_case code for this kind.
    pub fn code(self) -> &'static str {
        match self {
            Self::AuthFailed => "provider_auth_failed",
            Self::RateLimited => "provider_rate_limited",
            Self::Timeout => "provider_timeout",
            Self::Unavailable => "provider_unavailable",
            Self::BadRequest => "provider_bad_request",
            Self::BadResponse => "provider_bad_response",
        }
    }
}

/// A failed call to an external provider (embedder, LLM, reranker).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{provider} {}: {message}", kind.code())]
pub struct ProviderError {
    /// What kind of failure it was.
    pub kind: ProviderErrorKind,
    /// Which provider failed (e.g. `openai-embedder`).
    pub provider: String,
    /// A message safe to show to callers: never contains secrets.
    pub message: String,
    /// How long the provider asked us to wait, when it said.
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    /// Builds a provider error without a retry hint.
    pub fn new(kind: ProviderErrorKind, provider: impl Into<String>, message: impl Into<String>) -> Self {
        Self { kind, provider: provider.into(), message: message.into(), retry_after: None }
    }
}

#[cfg(test)]
mod tests {
    use super::transient_database_code;

    #[test]
    fn classifies_database_codes() {
        for transient in ["08006", "57P01", "53300", "5", "517", "6", "10", "13", "14"] {
            assert!(transient_database_code(transient), "{transient}");
        }
        for bug in ["42P01", "23505", "1", "19", "2067"] {
            assert!(!transient_database_code(bug), "{bug}");
        }
    }
}
