//! The dashboard at `/ui`: one page of plain JavaScript and CSS (`assets/ui/`), compiled into the
//! binary, with nothing loaded from anywhere else (its Content-Security-Policy says so). It calls
//! the same API as any client, with the API key in the `X-API-Key` header (kept in the browser
//! tab's session storage, never in a cookie, so a cross-site request carries no credentials), and
//! the server applies the same rights; the page only hides what the caller's role may not do.

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::state::AppState;

const PAGE: &str = include_str!("../assets/ui/index.html");
const SCRIPT: &str = include_str!("../assets/ui/app.js");
const STYLES: &str = include_str!("../assets/ui/app.css");

/// This server's own script and styles only; data: for the (empty) icon.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// The page, its assets, and what it needs to know before signing in (whether keys are needed).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { ([(header::CONTENT_SECURITY_POLICY, POLICY)], Html(PAGE)) }))
        .route("/ui/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/ui/app.css", get(|| async { asset("text/css; charset=utf-8", STYLES) }))
        .route(
            "/ui/settings.json",
            get(|State(state): State<AppState>| async move {
                Json(serde_json::json!({ "auth": !state.settings.auth.disabled }))
            }),
        )
}
