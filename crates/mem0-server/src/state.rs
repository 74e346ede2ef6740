//! Shared application state, handed to handlers with `State`.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use mem0_core::{Caller, Memory};

use crate::config::Settings;
use crate::error::ApiError;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The memory service.
    pub memory: Arc<Memory>,
    /// The loaded settings.
    pub settings: Arc<Settings>,
}

/// The caller of the current request. Until authentication is configured every request acts as
/// the local administrator of the default tenant; the core still checks every operation against it.
#[derive(Debug, Clone)]
pub struct RequestCaller(pub Caller);

impl FromRequestParts<AppState> for RequestCaller {
    type Rejection = ApiError;

    async fn from_request_parts(_parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        Ok(Self(Caller::local_admin(state.settings.server.default_tenant.clone())))
    }
}
