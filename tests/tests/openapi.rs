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
         (or MEM0_UPDATE_OPENAPI=1 cargo test -p mem0-http-tests --test openapi)"
    );
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
    let expected = [
        ("/memories", "post"),
        ("/memories", "get"),
        ("/memories", "delete"),
        ("/memories/{memory_id}", "get"),
        ("/memories/{memory_id}", "put"),
        ("/memories/{memory_id}", "delete"),
        ("/memories/{memory_id}/history", "get"),
        ("/search", "post"),
        ("/reset", "post"),
        ("/health", "get"),
        ("/ready", "get"),
    ];
    for (path, verb) in expected {
        let operation = &paths[path][verb];
        assert!(operation.is_object(), "{verb} {path} is documented");
        assert!(operation["summary"].as_str().is_some_and(|s| !s.is_empty()), "{verb} {path} has a summary");
        if path != "/health" {
            let errors: Vec<&String> = operation["responses"]
                .as_object()
                .expect("responses")
                .keys()
                .filter(|code| code.starts_with(['4', '5']))
                .collect();
            assert!(!errors.is_empty(), "{verb} {path} documents its errors");
        }
    }
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
