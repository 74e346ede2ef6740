//! `Idempotency-Key` on writes (the write and admin routes; reads, `POST /search` included,
//! ignore it): the first request with a key runs and its response is kept for
//! 24 hours per tenant (beside the history, so replicas on Postgres share it); a retry with the
//! same key and the same request (method, path, body, principal) gets that response again, with
//! `Idempotent-Replayed: true`, and changes nothing; a retry with another request gets 422
//! `idempotency_key_reused`; one while the first still runs gets 409
//! `idempotency_key_in_progress`. A first request that fails with a 5xx or 429 changed nothing
//! (writes are all or nothing), so its key is released and a retry runs again.
//!
//! The request runs on its own task once claimed: a client that hangs up cannot leave the key
//! claimed for ever (a claim abandoned by a dead server is taken over after
//! `server.request_timeout_secs` + `server.shutdown_grace_secs`).
//!
//! Not on `POST /api-keys` and `POST /webhooks`: their responses hold a secret shown once (400);
//! nor on `POST /import`, idempotent by memory id already, whose body is streamed (400).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use mem0_core::history::{Claim, StoredResponse};
use mem0_core::Caller;
use sha2::{Digest, Sha256};
use tracing::Instrument as _;

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// The header marking a replayed response.
pub const REPLAYED: &str = "idempotent-replayed";
/// Longest key.
pub const MAX_KEY_LEN: usize = 255;
/// Largest response kept for replay; a larger one is answered once and its key released.
const MAX_STORED_BODY: usize = 4 * 1024 * 1024;

/// Middleware on the write routes (after authentication and body reading).
pub async fn idempotent(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let writes = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];
    let Some(raw) = request.headers().get(HEADER).cloned() else { return next.run(request).await };
    if !writes.contains(request.method()) {
        return next.run(request).await;
    }
    let key = match raw.to_str().ok().map(str::trim).filter(|key| valid_key(key)) {
        Some(key) => key.to_owned(),
        None => {
            return ApiError::validation(
                "Idempotency-Key",
                format!("1 to {MAX_KEY_LEN} visible ASCII characters (a UUID is a good key)"),
            )
            .into_response()
        }
    };
    let path = request.uri().path();
    if request.method() == Method::POST && matches!(path, "/api-keys" | "/webhooks") {
        let message = format!("not accepted on POST {path}: its response holds a secret shown only once");
        return ApiError::validation("Idempotency-Key", message).into_response();
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else { return next.run(request).await };
    let (parts, body) = request.into_parts();
    // The body was buffered by the body layer: collecting it again costs nothing.
    let Ok(body) = body.collect().await.map(http_body_util::Collected::to_bytes) else {
        return ApiError::new(ErrorCode::InvalidJson, "the body could not be read").into_response();
    };
    let fingerprint = fingerprint(&parts.method, &parts.uri, &caller.principal_id, &body);
    let keys = state.memory().history_store().idempotency();
    let settings = &state.settings.server;
    let stale_after = chrono::Duration::seconds(
        i64::try_from(settings.request_timeout_secs + settings.shutdown_grace_secs).unwrap_or(3600),
    );
    let claim = match keys.claim(&caller.tenant, &key, &fingerprint, chrono::Utc::now(), stale_after).await {
        Ok(claim) => claim,
        Err(error) => return ApiError::from(error).into_response(),
    };
    match claim {
        Claim::Replay(stored) => replay(stored),
        Claim::Mismatch => ApiError::new(
            ErrorCode::IdempotencyKeyReused,
            "this Idempotency-Key was used for a different request; use a new key for a new request",
        )
        .into_response(),
        Claim::InProgress => ApiError::new(
            ErrorCode::IdempotencyKeyInProgress,
            "a request with this Idempotency-Key is still running; retry once it has finished",
        )
        .into_response(),
        Claim::Run => {
            let request = Request::from_parts(parts, Body::from(body));
            let tenant = caller.tenant.clone();
            // On its own task: the outcome is recorded even when the client hangs up. The task
            // keeps the request's id and span.
            let id = crate::request_context::current_request_id();
            let work = async move {
                let response = next.run(request).await;
                settle(&keys, &tenant, &key, response).await
            };
            let task =
                tokio::spawn(crate::request_context::within_request(id, work).instrument(tracing::Span::current()));
            match task.await {
                Ok(response) => response,
                Err(error) => {
                    tracing::error!(%error, "idempotent request task failed");
                    ApiError::new(ErrorCode::InternalError, "the request failed").into_response()
                }
            }
        }
    }
}

/// Keeps `response` for replay (or releases the key when nothing changed), and returns it.
async fn settle(keys: &mem0_core::history::Idempotency, tenant: &str, key: &str, response: Response) -> Response {
    let status = response.status();
    let (parts, body) = response.into_parts();
    let bytes = match http_body_util::Limited::new(body, MAX_STORED_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            tracing::warn!(%error, "a response could not be kept for idempotent replay");
            if let Err(error) = keys.release(tenant, key).await {
                tracing::warn!(%error, "could not release an idempotency key");
            }
            return ApiError::new(ErrorCode::InternalError, "the response could not be produced").into_response();
        }
    };
    let outcome = if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        keys.release(tenant, key).await
    } else {
        keys.complete(tenant, key, &StoredResponse { status: status.as_u16(), body: bytes.to_vec() }).await
    };
    if let Err(error) = outcome {
        // The request itself went through; a retry may find the key still claimed (409) until
        // it is taken over as abandoned.
        tracing::warn!(%error, "could not record the outcome of an idempotent request");
    }
    Response::from_parts(parts, Body::from(bytes))
}

fn replay(stored: StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response = (status, stored.body).into_response();
    let headers = response.headers_mut();
    headers.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}

fn valid_key(key: &str) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len()) && key.bytes().all(|byte| byte.is_ascii_graphic())
}

/// What makes two requests "the same": method, path and query, principal, body.
fn fingerprint(method: &Method, uri: &axum::http::Uri, principal: &str, body: &[u8]) -> String {
    let mut digest = Sha256::new();
    for part in [method.as_str().as_bytes(), uri.to_string().as_bytes(), principal.as_bytes()] {
        digest.update(part);
        digest.update([0]);
    }
    digest.update(body);
    digest.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_short_visible_ascii() {
        assert!(valid_key("3f2a9c1e-0b7d-4c1a-9a55-2f0d8e6b1c44"));
        assert!(!valid_key(""));
        assert!(!valid_key("with space"));
        assert!(!valid_key("ключ"));
        assert!(!valid_key(&"k".repeat(MAX_KEY_LEN + 1)));
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        let uri: axum::http::Uri = "/memories".parse().expect("uri");
        let one = fingerprint(&Method::POST, &uri, "key:a", b"{}");
        assert_eq!(one, fingerprint(&Method::POST, &uri, "key:a", b"{}"));
        assert_ne!(one, fingerprint(&Method::POST, &uri, "key:b", b"{}"));
        assert_ne!(one, fingerprint(&Method::PUT, &uri, "key:a", b"{}"));
        assert_ne!(one, fingerprint(&Method::POST, &uri, "key:a", b"{ }"));
    }
}
