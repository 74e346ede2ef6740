//! The OpenAPI document: generated from the route table, served at `/openapi.json`, committed at
//! `openapi/openapi.json` (a test fails when the two differ).

use utoipa::OpenApi;

use crate::routes;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "mem0-rs",
        description = "Self-hosted long-term memory for AI agents: add conversations, search what matters, \
                       scoped per user, agent and run.",
        license(name = "Apache-2.0")
    ),
    tags(
        (name = "memories", description = "Add, list, read, change and delete memories"),
        (name = "search", description = "Find memories by meaning"),
        (name = "admin", description = "Tenant-wide operations"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
struct ApiDoc;

/// Returns the full OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    let (_, api) = routes::router().split_for_parts();
    let mut doc = ApiDoc::openapi();
    doc.merge(api);
    doc
}

/// Returns the document as pretty JSON with a trailing newline (the committed form).
pub fn document_json() -> String {
    let mut json = document().to_pretty_json().unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
    json.push('\n');
    json
}
