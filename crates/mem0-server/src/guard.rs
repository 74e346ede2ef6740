//! The gate every request passes after it gets its id: authentication (the caller is put in the
//! request extensions for handlers and in the response extensions for the request log) and the
//! rate limit of its route class, with `RateLimit-*` headers and 429 + `Retry-After`.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};
use crate::rate_limit::{client_ip, Decision, RouteClass};
use crate::state::AppState;

/// Marks responses of open routes (no credentials): the request log leaves them out.
#[derive(Debug, Clone, Copy)]
pub struct OpenRoute;

/// Middleware of a group of routes of one rate-limit `class`: authenticate (not for open routes),
/// then rate limit.
pub async fn guard(State((state, class)): State<(AppState, RouteClass)>, mut request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|info| info.0);
    let trusted = &state.settings.rate_limit.trusted_proxies;
    let address = client_ip(peer, request.headers(), trusted).map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
    let address_key = format!("ip:{address}");
    if class == RouteClass::Open {
        let mut response = limited(&state, RouteClass::Open, &address_key, next.run(request)).await;
        response.extensions_mut().insert(OpenRoute);
        return response;
    }
    let caller = match state.auth.authenticate(request.headers()).await {
        Ok(caller) => caller,
        Err(error) => {
            // Failed credentials count against the client address, so guessing is throttled.
            return limited(&state, RouteClass::Open, &address_key, async { error.into_response() }).await;
        }
    };
    let key = format!("{}/{}", caller.tenant, caller.principal_id);
    request.extensions_mut().insert(caller.clone());
    let mut response = limited(&state, class, &key, next.run(request)).await;
    response.extensions_mut().insert(caller);
    response
}

async fn limited(
    state: &AppState,
    class: RouteClass,
    key: &str,
    run: impl std::future::Future<Output = Response>,
) -> Response {
    let Some(limits) = &state.limits else { return run.await };
    match limits.check(class, key) {
        Decision::Allowed { limit, remaining } => {
            let mut response = run.await;
            set_headers(&mut response, limit, remaining, None);
            response
        }
        Decision::Limited { limit, retry_after } => {
            crate::metrics::server().rate_limited(class);
            let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            let mut response = ApiError::new(
                ErrorCode::RateLimited,
                format!("rate limit of {limit} requests a minute reached; retry in {seconds} s"),
            )
            .with_retry_after(std::time::Duration::from_secs(seconds.max(1)))
            .into_response();
            set_headers(&mut response, limit, 0, Some(seconds.max(1)));
            response
        }
    }
}

fn set_headers(response: &mut Response, limit: u32, remaining: u32, reset: Option<u64>) {
    let headers = response.headers_mut();
    let mut put = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    };
    put("ratelimit-limit", limit.to_string());
    put("ratelimit-remaining", remaining.to_string());
    put("ratelimit-policy", format!("{limit};w=60"));
    if let Some(reset) = reset {
        put("ratelimit-reset", reset.to_string());
    }
}
