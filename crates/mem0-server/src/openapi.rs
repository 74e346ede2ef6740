//! The OpenAPI document: generated from the route table, served at `/openapi.json`, committed at
//! `openapi/openapi.json` (a test fails when the two differ).

use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::{Modify, OpenApi};

use crate::routes;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "mem0-rs",
        description = "Self-hosted long-term memory for AI agents: add conversations, search what matters, \
                       scoped per user, agent and run.",
        license(name = "Apache-2.0")
    ),
    modifiers(&Security),
    tags(
        (name = "memories", description = "Add, list, read, change and delete memories"),
        (name = "search", description = "Find memories by meaning"),
        (name = "admin", description = "Tenant-wide operations"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
struct ApiDoc;

/// Declares the two ways to authenticate and requires one of them everywhere but the open routes.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-API-Key",
                "An API key (also accepted as `Authorization: Token <key>`)",
            ))),
        );
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some("A JWT from your identity provider"))
                    .build(),
            ),
        );
        openapi.security = Some(vec![
            SecurityRequirement::new("api_key", Vec::<String>::new()),
            SecurityRequirement::new("bearer", Vec::<String>::new()),
        ]);
    }
}

/// Marks the routes anyone may call.
fn mark_open_routes(doc: &mut utoipa::openapi::OpenApi) {
    for route in crate::guard::OPEN_ROUTES {
        if let Some(item) = doc.paths.paths.get_mut(route) {
            if let Some(operation) = item.get.as_mut() {
                operation.security = Some(vec![SecurityRequirement::default()]);
            }
        }
    }
}

/// Returns the full OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    let (_, api) = routes::router().split_for_parts();
    let mut doc = ApiDoc::openapi();
    doc.merge(api);
    mark_open_routes(&mut doc);
    doc
}

/// Returns the document as pretty JSON with a trailing newline (the committed form).
pub fn document_json() -> String {
    let mut json = document().to_pretty_json().unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
    json.push('\n');
    json
}
