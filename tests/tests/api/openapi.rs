//! The committed OpenAPI document matches the code, every operation is summarised and documents
//! its errors, every `$ref` resolves, and the server serves the same document.

use mem0_http_tests::TestServer;
use serde_json::Value;

fn committed_path() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/openapi.json"))
}

#[test]
fn committed_document_is_current() {
    let generated = mem0_server::openapi::document_json();
    if std::env::var_os("MEM0_UPDATE_OPENAPI").is_some() {
        std::fs::write(committed_path(), &generated).expect("write openapi.json");
    }
    let committed = std::fs::read_to_string(committed_path()).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/openapi.json is stale: regenerate it with `cargo run -p mem0-server -- openapi > openapi/openapi.json` \
         (or MEM0_UPDATE_OPENAPI=1 cargo test -p mem0-http-tests --test api openapi::)"
    );
}

/// A schema's properties, including those of the schemas it composes (`allOf`, as a flattened
/// field renders), resolved against the document's components.
fn properties(doc: &Value, schema: &Value) -> serde_json::Map<String, Value> {
    let mut all = schema["properties"].as_object().cloned().unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        let part = match part["$ref"].as_str() {
            Some(target) => &doc["components"]["schemas"][target.trim_start_matches("#/components/schemas/")],
            None => part,
        };
        all.extend(properties(doc, part));
    }
    all
}

fn collect_refs(value: &Value, refs: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "$ref" {
                    if let Some(target) = inner.as_str() {
                        refs.push(target.to_owned());
                    }
                }
                collect_refs(inner, refs);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, refs)),
        _ => {}
    }
}

#[test]
fn operations_are_documented_and_refs_resolve() {
    let doc: Value = serde_json::from_str(&mem0_server::openapi::document_json()).expect("json");
    let paths = doc["paths"].as_object().expect("paths");
    let mut operations = 0;
    for (path, item) in paths {
        for (verb, operation) in item.as_object().expect("path item") {
            operations += 1;
            let name = format!("{verb} {path}");
            assert!(operation["summary"].as_str().is_some_and(|s| !s.is_empty()), "{name} has a summary");
            assert!(operation["operationId"].is_string(), "{name} has an operation id");
            let responses = operation["responses"].as_object().expect("responses");
            let open = operation["security"] == serde_json::json!([{}]);
            // What the layers in front of every handler can answer.
            let mut layer_codes = vec!["403", "429", "504"];
            if !open {
                layer_codes.extend(["401", "503"]);
            }
            if operation["requestBody"].is_object() {
                layer_codes.extend(["408", "413", "415"]);
            }
            for code in layer_codes {
                assert!(responses.contains_key(code), "{name} documents {code}");
            }
            for (code, response) in responses {
                let headers = &response["headers"];
                assert!(headers["x-request-id"].is_object(), "{name} {code} declares X-Request-ID");
                assert!(headers["ratelimit-limit"].is_object(), "{name} {code} declares RateLimit-Limit");
                if code == "429" || code == "503" {
                    assert!(headers["retry-after"].is_object(), "{name} {code} declares Retry-After");
                }
                if code.starts_with(['4', '5']) {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody",
                        "{name} {code} is an error envelope"
                    );
                }
            }
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                if matches!(parameter["name"].as_str(), Some("memory_id" | "key_id")) {
                    assert_eq!(parameter["schema"]["format"], "uuid", "{name}: ids are UUIDs");
                }
            }
        }
    }
    assert!(operations >= 20, "{operations} operations");
    // The bounds the server enforces.
    let schemas = &doc["components"]["schemas"];
    let search = &properties(&doc, &schemas["SearchRequest"]);
    assert_eq!((search["top_k"]["minimum"].as_f64(), search["top_k"]["maximum"].as_f64()), (Some(1.0), Some(1000.0)));
    assert_eq!(
        (search["threshold"]["minimum"].as_f64(), search["threshold"]["maximum"].as_f64()),
        (Some(0.0), Some(1.0))
    );
    let add = &schemas["AddMemoriesRequest"];
    let add_properties = properties(&doc, add);
    assert_eq!(
        (add_properties["messages"]["minItems"].as_u64(), add_properties["messages"]["maxItems"].as_u64()),
        (Some(1), Some(100))
    );
    // The scope ids are one type, in bodies and queries alike.
    for (schema, fields) in [(add, &add_properties), (&schemas["SearchRequest"], search)] {
        assert!(schema.to_string().contains("#/components/schemas/ScopeIds"), "{schema}");
        assert!(fields.contains_key("user_id") && fields.contains_key("run_id"), "{fields:?}");
    }
    assert_eq!(add["example"]["infer"], false, "the example stores without an LLM");
    assert!(add_properties["timestamp"].to_string().contains("oneOf"), "timestamp: text or number");
    assert_eq!(schemas["MessageRole"]["enum"], serde_json::json!(["user", "assistant", "system"]));
    assert_eq!(schemas["RoleName"]["enum"], serde_json::json!(["read", "write", "admin"]));
    assert_eq!(schemas["ScopeKindName"]["enum"], serde_json::json!(["user", "agent", "run"]));
    assert_eq!(schemas["CreateApiKeyRequest"]["properties"]["user_ids"]["minItems"], 1);
    let list = paths["/memories"]["get"]["parameters"].as_array().expect("parameters");
    let page_size = list.iter().find(|parameter| parameter["name"] == "page_size").expect("page_size");
    assert!(list.iter().any(|parameter| parameter["name"] == "user_id"), "list takes the scope ids");
    assert_eq!(
        (page_size["schema"]["minimum"].as_f64(), page_size["schema"]["maximum"].as_f64()),
        (Some(1.0), Some(1000.0))
    );
    // Links use the specification's field names.
    let links = &paths["/memories"]["post"]["responses"]["200"]["links"];
    assert_eq!(links["GetMemory"]["operationId"], "get_memory", "{links}");
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(!refs.is_empty());
    for target in refs {
        let name = target.trim_start_matches("#/components/schemas/");
        assert!(doc["components"]["schemas"][name].is_object(), "{target} resolves");
    }
    let codes = doc["components"]["schemas"]["ErrorCode"]["enum"].as_array().expect("error codes");
    assert!(codes.iter().any(|code| code == "memory_not_found"));
}

#[tokio::test]
async fn served_document_and_docs_page() {
    let server = TestServer::start().await;
    let reply = server.get("/openapi.json").await;
    assert_eq!(reply.status, 200);
    let generated: Value = serde_json::from_str(&mem0_server::openapi::document_json()).expect("json");
    assert_eq!(reply.body, generated);
    let docs = server.client.get(format!("{}/docs", server.base)).send().await.expect("docs");
    assert_eq!(docs.status(), 200);
    let policy = docs.headers()["content-security-policy"].to_str().expect("policy").to_owned();
    assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"), "{policy}");
    let html = docs.text().await.expect("html");
    assert!(html.contains("<!doctype html>"), "docs page is html");
    // Offline: the page and its initializer name no other host; every asset comes from this server.
    let init = server.client.get(format!("{}/docs/init.js", server.base)).send().await.expect("init");
    let init = init.text().await.expect("init text");
    for text in [&html, &init] {
        assert!(!text.contains("http://") && !text.contains("https://") && !text.contains("//cdn"), "{text}");
    }
    assert!(init.contains("validatorUrl: null"), "no validator badge from validator.swagger.io");
    for (asset, kind, at_least) in
        [("swagger-ui-bundle.js", "text/javascript", 1_000_000), ("swagger-ui.css", "text/css", 100_000)]
    {
        assert!(html.contains(&format!("/docs/{asset}")), "{asset} is referenced");
        let reply = server.client.get(format!("{}/docs/{asset}", server.base)).send().await.expect("asset");
        assert_eq!(reply.status(), 200, "{asset}");
        assert!(reply.headers()["content-type"].to_str().expect("type").starts_with(kind));
        assert!(reply.bytes().await.expect("bytes").len() > at_least, "{asset} is the real bundle");
    }
}
