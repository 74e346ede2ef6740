//! The interactive API docs at `/docs`: Swagger UI (npm `swagger-ui-dist`, pinned; see
//! `scripts/fetch-docs-ui.sh`) compiled into the binary and reading `/openapi.json`. Nothing is
//! loaded from anywhere else, and the page's Content-Security-Policy says so to the browser.

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const BUNDLE: &str = include_str!("../assets/swagger-ui/swagger-ui-bundle.js");
const STYLES: &str = include_str!("../assets/swagger-ui/swagger-ui.css");

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>mem0-rs API</title>
  <link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
  <div id="docs"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script src="/docs/init.js"></script>
</body>
</html>
"#;

/// Starts the UI on the served document; no validator badge (it would call validator.swagger.io).
const INIT: &str = r##"window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#docs",
    deepLinking: true,
    validatorUrl: null,
    tryItOutEnabled: false,
    displayRequestDuration: true
  });
});
"##;

/// Only this server's own scripts, styles and images (Swagger UI draws icons as data URIs).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                      connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "public, max-age=86400")], body).into_response()
}

/// The docs page and its assets.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/docs", get(|| async { ([(header::CONTENT_SECURITY_POLICY, POLICY)], Html(PAGE)) }))
        .route("/docs/init.js", get(|| async { asset("text/javascript; charset=utf-8", INIT) }))
        .route("/docs/swagger-ui-bundle.js", get(|| async { asset("text/javascript; charset=utf-8", BUNDLE) }))
        .route("/docs/swagger-ui.css", get(|| async { asset("text/css; charset=utf-8", STYLES) }))
}
