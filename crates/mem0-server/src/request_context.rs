//! Per-request context: the request id (accepted from `X-Request-ID` when sane, otherwise
//! generated), echoed on every response and available to error bodies; a tracing span with method,
//! route template and id; one log line per request with status and latency;
//! the request metrics ([`crate::metrics`]). Also the time limit each group of routes puts on
//! its requests ([`time_limit`]).

use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use mem0_core::history::RequestLogEntry;
use mem0_core::Caller;

use crate::background_log::RequestLogWriter;
use crate::error::{ApiError, ErrorCode};

/// The request id header.
pub static REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    static REQUEST_ID: String;
}

/// Returns the id of the request being handled, or `unknown` outside a request.
pub fn current_request_id() -> String {
    REQUEST_ID.try_with(Clone::clone).unwrap_or_else(|_| "unknown".to_owned())
}

/// Runs `future` as part of the request `id` (for work a handler moves to a task of its own:
/// error bodies and logs there keep the request's id).
pub fn within_request<F: std::future::Future>(id: String, future: F) -> impl std::future::Future<Output = F::Output> {
    REQUEST_ID.scope(id, future)
}

fn incoming_id(request: &Request) -> Option<String> {
    let value = request.headers().get(&REQUEST_ID_HEADER)?.to_str().ok()?;
    let sane = !value.is_empty()
        && value.len() <= 64
        && value.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    sane.then(|| value.to_owned())
}

/// What the middleware needs: where request log entries go, and whether spans are exported.
#[derive(Debug, Clone)]
pub struct ContextSettings {
    /// The request log.
    pub log: RequestLogWriter,
    /// `traces.enabled`.
    pub traces: bool,
}

/// Middleware of each group of routes: the group's time limit (`server.request_timeout_secs`;
/// `server.import_timeout_secs` for the streamed import), then 504 `request_timeout`.
pub async fn time_limit(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            ApiError::new(ErrorCode::RequestTimeout, format!("the request took longer than {} s", limit.as_secs()))
                .into_response()
        }
    }
}

/// Middleware: request id, span, access log line, request log entry and metrics.
pub async fn request_context(State(context): State<ContextSettings>, mut request: Request, next: Next) -> Response {
    let request_id = incoming_id(&request).unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        request.headers_mut().insert(REQUEST_ID_HEADER.clone(), value);
    }
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    // Exported, the span is named after the route and continues the caller's trace; the log
    // shows it without those fields.
    let span = if context.traces {
        let span = tracing::info_span!(
            "request",
            otel.name = %format!("{method} {route}"),
            otel.kind = "server",
            %method,
            %route,
            request_id = %request_id,
            status = tracing::field::Empty,
        );
        crate::traces::continue_trace(&span, request.headers());
        span
    } else {
        tracing::info_span!("request", %method, %route, request_id = %request_id, status = tracing::field::Empty)
    };
    let in_flight = crate::metrics::server().start(&method, &route);
    let started = Instant::now();
    let id_for_scope = request_id.clone();
    let mut response = REQUEST_ID.scope(id_for_scope, next.run(request)).instrument(span.clone()).await;
    let status = response.status().as_u16();
    span.record("status", status);
    in_flight.finish(status);
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    if response.extensions().get::<crate::guard::OpenRoute>().is_none() {
        let caller = response.extensions().get::<Caller>();
        context.log.record(RequestLogEntry {
            id: 0,
            at: chrono::Utc::now(),
            method: method.to_string(),
            route: route.clone(),
            status,
            latency_ms: (latency_ms * 100.0).round() / 100.0,
            principal_id: caller.map(|caller| caller.principal_id.clone()),
            tenant: caller.map(|caller| caller.tenant.clone()),
        });
    }
    span.in_scope(|| {
        if status >= 500 {
            tracing::warn!(status, latency_ms, "request failed");
        } else {
            tracing::info!(status, latency_ms, "request");
        }
    });
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER.clone(), value);
    }
    response
}
