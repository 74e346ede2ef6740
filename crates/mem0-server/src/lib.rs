//! mem0-server: the HTTP shell around [`mem0_core::Memory`].
//!
//! Handlers parse, call one core method with the request's caller, and map the result. This crate
//! owns routing, the error envelope, request ids, limits, configuration loading and OpenAPI.

pub mod config;
pub mod error;
pub mod openapi;
pub mod request_context;
pub mod routes;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{middleware, Router};
use mem0_core::Memory;
use tokio::net::TcpListener;
use tower::limit::GlobalConcurrencyLimitLayer;
use utoipa_scalar::{Scalar, Servable};

use crate::config::Settings;
use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// Builds the application router for `state`.
pub fn app(state: AppState) -> Router {
    let server = &state.settings.server;
    let timeout = Duration::from_secs(server.request_timeout_secs);
    let (router, api) = routes::router().split_for_parts();
    let mut doc = openapi::document();
    doc.paths = api.paths;
    let doc_json = Arc::new(openapi::document_json());
    router
        .route(
            "/openapi.json",
            get(move || {
                let body = Arc::clone(&doc_json);
                async move { ([(axum::http::header::CONTENT_TYPE, "application/json")], (*body).clone()) }
            }),
        )
        .merge(Scalar::with_url("/docs", doc))
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(server.body_limit_bytes))
        .layer(GlobalConcurrencyLimitLayer::new(server.concurrency_limit))
        .layer(middleware::from_fn_with_state(timeout, request_context::request_context))
        .with_state(state)
}

async fn route_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, ErrorCode::RouteNotFound, "no such route; see /docs for the API")
}

async fn method_not_allowed() -> impl IntoResponse {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, ErrorCode::MethodNotAllowed, "method not allowed on this route")
}

/// Builds the state from settings: loads the embedder, opens the stores, checks dimensions.
///
/// # Errors
/// Any startup failure, with a message saying what to fix.
pub async fn build_state(settings: Settings) -> anyhow::Result<AppState> {
    let memory = Memory::from_config(&settings.memory)
        .await
        .map_err(|error| anyhow::anyhow!("cannot start the memory service: {error}"))?;
    Ok(AppState { memory: Arc::new(memory), settings: Arc::new(settings) })
}

/// Serves `state` on `listener` until `shutdown` completes, then drains in-flight requests.
///
/// # Errors
/// I/O errors of the listener.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(state)).with_graceful_shutdown(shutdown).await
}
