//! Shared application state, handed to handlers with `State`.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use mem0_core::{Caller, Memory};

use axum::http::StatusCode;

use crate::auth::Authenticator;
use crate::config::Settings;
use crate::error::{ApiError, ErrorCode};
use crate::rate_limit::Limits;
use crate::request_log::RequestLogWriter;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The memory service.
    pub memory: Arc<Memory>,
    /// The loaded settings.
    pub settings: Arc<Settings>,
    /// Turns credentials into callers.
    pub auth: Arc<Authenticator>,
    /// Rate limits (`None` when switched off).
    pub limits: Option<Arc<dyn Limits>>,
    /// The request log.
    pub request_log: RequestLogWriter,
}

/// The caller of the current request, established by the guard middleware; the core checks every
/// operation against it.
#[derive(Debug, Clone)]
pub struct RequestCaller(pub Caller);

impl FromRequestParts<AppState> for RequestCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &AppState) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().map(Self).ok_or_else(|| {
            ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated, "authentication required")
        })
    }
}
