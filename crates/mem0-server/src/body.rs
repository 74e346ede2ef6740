//! Reading request bodies before a request takes a concurrency slot: the whole body (up to
//! `server.body_limit_bytes`) must arrive within `server.body_read_timeout_secs`, or the request
//! gets 408 `request_body_timeout`. Slow senders therefore never hold a slot, and cannot starve
//! the requests that are ready to run.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use crate::error::{ApiError, ErrorCode};

/// Limits of body reading.
#[derive(Debug, Clone, Copy)]
pub struct BodySettings {
    /// Largest body, in bytes.
    pub limit: usize,
    /// Longest time to receive it.
    pub timeout: Duration,
}

/// Middleware: buffer the body within the limits, then hand the request on. (The streamed
/// routes, `POST /import`, are not behind it: they read their body as it arrives, with the same
/// timeout per part.)
pub async fn read_body(State(settings): State<BodySettings>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(settings.timeout, Limited::new(body, settings.limit).collect()).await;
    match read {
        Ok(Ok(collected)) => next.run(Request::from_parts(parts, Body::from(collected.to_bytes()))).await,
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            ApiError::new(ErrorCode::PayloadTooLarge, "request body is larger than the configured limit")
                .into_response()
        }
        Ok(Err(error)) => {
            ApiError::new(ErrorCode::InvalidJson, format!("the body could not be read: {error}")).into_response()
        }
        Err(_) => {
            tracing::info!(timeout_secs = settings.timeout.as_secs(), "request body did not arrive in time");
            ApiError::new(
                ErrorCode::RequestBodyTimeout,
                format!("the request body did not arrive within {} s", settings.timeout.as_secs()),
            )
            .into_response()
        }
    }
}
