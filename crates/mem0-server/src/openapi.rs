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

/// The paths anyone may call: those of the open group.
fn open_paths() -> Vec<String> {
    let (_, open) = routes::open_router().split_for_parts();
    open.paths.paths.keys().cloned().collect()
}

/// Marks the routes anyone may call.
fn mark_open_routes(doc: &mut utoipa::openapi::OpenApi) {
    for route in open_paths() {
        if let Some(item) = doc.paths.paths.get_mut(&route) {
            if let Some(operation) = item.get.as_mut() {
                operation.security = Some(vec![SecurityRequirement::default()]);
            }
        }
    }
}

/// The responses every operation can give besides its own, by the layers it passes (see
/// [`crate::app`]), and the headers on every response. Declared here once for all operations.
fn add_layer_responses(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{PathItem, RefOr};
    let open_paths = open_paths();
    for (path, item) in &mut doc.paths.paths {
        let open = open_paths.contains(path);
        let PathItem { get, put, post, delete, patch, .. } = item;
        for operation in [get, put, post, delete, patch].into_iter().flatten() {
            let has_body = operation.request_body.is_some();
            let mut common: Vec<(&str, &str)> = vec![
                (
                    "403",
                    "Refused: outside the caller's rights, a host name this server does not answer for, or a \
                         cross-site write while authentication is disabled",
                ),
                (
                    "429",
                    "Rate limited (per principal and route class; per client address without credentials); \
                         see `Retry-After`",
                ),
                ("504", "The request took longer than `server.request_timeout_secs`"),
            ];
            if !open {
                common.push(("401", "No valid credentials"));
                common.push(("503", "A store (or a provider) is unavailable; see `Retry-After`"));
            }
            if has_body {
                common.push(("408", "The body did not arrive within `server.body_read_timeout_secs`"));
                common.push(("413", "The body is larger than `server.body_limit_bytes`"));
                common.push(("415", "The body is not `application/json`"));
            }
            for (status, description) in common {
                operation
                    .responses
                    .responses
                    .entry(status.to_owned())
                    .or_insert_with(|| RefOr::T(error_response(description)));
            }
            for (status, response) in &mut operation.responses.responses {
                if let RefOr::T(response) = response {
                    add_headers(status, response);
                }
            }
        }
    }
}

fn error_response(description: &str) -> utoipa::openapi::Response {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    ResponseBuilder::new()
        .description(description)
        .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
        .build()
}

fn add_headers(status: &str, response: &mut utoipa::openapi::Response) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::{ObjectBuilder, Type};
    let header = |kind: Type, description: &str| {
        HeaderBuilder::new().schema(ObjectBuilder::new().schema_type(kind)).description(Some(description)).build()
    };
    let headers = &mut response.headers;
    headers.insert(
        "x-request-id".to_owned(),
        header(Type::String, "The request id (a sane incoming `X-Request-ID` is kept); also in error bodies"),
    );
    if status == "429" || status == "503" {
        headers.insert("retry-after".to_owned(), header(Type::Integer, "Seconds to wait before retrying"));
    }
    // Present whenever rate limits are on (`rate_limit.enabled` with authentication).
    headers.insert("ratelimit-limit".to_owned(), header(Type::Integer, "Requests a minute of this route class"));
    headers.insert("ratelimit-remaining".to_owned(), header(Type::Integer, "Requests left right now"));
    headers.insert("ratelimit-policy".to_owned(), header(Type::String, "The limit, as `<limit>;w=60`"));
}

/// The `Idempotency-Key` header on the writes that take it (see [`crate::idempotency`]), with
/// the two answers it adds and the header of a replayed response.
fn add_idempotency(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::{ObjectBuilder, PathItem, RefOr, Required, Type};
    // The write and admin groups take the header (see `crate::app`).
    let taking: Vec<String> = routes::api_groups()
        .into_iter()
        .filter(|(class, _)| *class != crate::rate_limit::RouteClass::Read)
        .flat_map(|(_, group)| group.split_for_parts().1.paths.paths.into_keys())
        .collect();
    for (path, item) in &mut doc.paths.paths {
        if !taking.contains(path) {
            continue;
        }
        let PathItem { put, post, delete, patch, .. } = item;
        // Their responses hold a secret shown once (see `crate::idempotency`).
        let takes_key = |method: &str| !(method == "post" && matches!(path.as_str(), "/api-keys" | "/webhooks"));
        for (method, operation) in [("put", put), ("post", post), ("delete", delete), ("patch", patch)] {
            let Some(operation) = operation.as_mut() else { continue };
            if !takes_key(method) {
                continue;
            }
            let parameter = ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "Makes a retry safe: the first response with this key is replayed for 24 hours to a \
                     retry of the same request (422 for a different one, 409 while the first still runs). \
                     1 to 255 visible ASCII characters, e.g. a UUID.",
                ))
                .schema(Some(ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(255))))
                .build();
            operation.parameters.get_or_insert_with(Vec::new).push(parameter);
            for (status, description) in [
                ("409", "A request with this `Idempotency-Key` is still running (`idempotency_key_in_progress`), or the memory changed meanwhile (`conflict`)"),
                ("422", "This `Idempotency-Key` was used for a different request (`idempotency_key_reused`)"),
                ("400", "Invalid input, e.g. a malformed `Idempotency-Key`"),
            ] {
                operation.responses.responses.entry(status.to_owned()).or_insert_with(|| RefOr::T(error_response(description)));
            }
            for (status, response) in &mut operation.responses.responses {
                if let (true, RefOr::T(response)) = (status.starts_with('2'), response) {
                    let header = HeaderBuilder::new()
                        .schema(ObjectBuilder::new().schema_type(Type::String))
                        .description(Some("`true` on a response replayed for a retry with the same `Idempotency-Key`"))
                        .build();
                    response.headers.insert(crate::idempotency::REPLAYED.to_owned(), header);
                }
            }
        }
    }
}

/// Links from responses that return memory ids to the operations taking one (generated clients
/// and stateful fuzzers follow them).
fn add_links(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::link::LinkBuilder;
    use utoipa::openapi::RefOr;
    let targets = [
        ("GetMemory", "get_memory", "Read it"),
        ("UpdateMemory", "update_memory", "Change it"),
        ("MemoryHistory", "memory_history", "Its history"),
        ("DeleteMemory", "delete_memory", "Delete it"),
    ];
    let sources =
        [("/memories", "200", "$response.body#/results/0/id"), ("/search", "200", "$response.body#/results/0/id")];
    for (path, status, expression) in sources {
        let Some(operation) = doc.paths.paths.get_mut(path).and_then(|item| item.post.as_mut()) else { continue };
        let Some(RefOr::T(response)) = operation.responses.responses.get_mut(status) else { continue };
        for (name, operation_id, description) in targets {
            let link = LinkBuilder::new()
                .operation_id(operation_id)
                .parameter("memory_id", expression)
                .description(format!("{description}: the first memory of the results"))
                .build();
            response.links.insert(name.to_owned(), RefOr::T(link));
        }
    }
}

/// Returns the full OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    let (_, api) = routes::router().split_for_parts();
    let mut doc = ApiDoc::openapi();
    doc.merge(api);
    mark_open_routes(&mut doc);
    add_idempotency(&mut doc);
    add_layer_responses(&mut doc);
    add_links(&mut doc);
    doc
}

/// Returns the document as pretty JSON with a trailing newline (the committed form).
pub fn document_json() -> String {
    let mut value =
        serde_json::to_value(document()).unwrap_or_else(|error| serde_json::json!({"error": error.to_string()}));
    camel_case_links(&mut value);
    let mut json = serde_json::to_string_pretty(&value).unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
    json.push('\n');
    json
}

/// utoipa 5 writes Link Objects' fields in snake case (`operation_id`); the specification names
/// them `operationId`, `operationRef`, `requestBody`.
fn camel_case_links(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::Object(links)) = map.get_mut("links") {
                for link in links.values_mut() {
                    if let serde_json::Value::Object(link) = link {
                        for (from, to) in [
                            ("operation_id", "operationId"),
                            ("operation_ref", "operationRef"),
                            ("request_body", "requestBody"),
                        ] {
                            if let Some(field) = link.remove(from) {
                                link.insert(to.to_owned(), field);
                            }
                        }
                    }
                }
            }
            map.values_mut().for_each(camel_case_links);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(camel_case_links),
        _ => {}
    }
}
