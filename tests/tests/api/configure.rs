//! `/configure`: the view never shows secrets, changes need the global admin, and a change that
//! fails validation, the SSRF check, the provider probe or the dimension check leaves the running
//! configuration untouched; a good change is swapped in and persisted without secrets.

use mem0_core::providers::embedder::EmbedderProvider;
use mem0_http_tests::{local_embedder, test_settings, Reply, StoreKind, TestServer};
use reqwest::Method;
use serde_json::{json, Value};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const ADMIN_KEY: &str = "bootstrap-admin-key-0123456789-abcdefghij";
const PROVIDER_SECRET: &str = "sk-provider-secret-never-shown";

async fn call(server: &TestServer, key: &str, method: Method, path: &str, body: Option<Value>) -> Reply {
    let mut request = server.client.request(method, format!("{}{path}", server.base)).header("x-api-key", key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    Reply::read_public(request.send().await.expect("send")).await
}

async fn fake_provider(dimension: usize) -> MockServer {
    let provider = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(move |request: &Request| {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let count = body["input"].as_array().map_or(0, Vec::len);
            let data: Vec<Value> = (0..count)
                .map(|index| {
                    let mut vector = vec![0.0_f32; dimension];
                    vector[index % dimension] = 1.0;
                    json!({"index": index, "embedding": vector})
                })
                .collect();
            ResponseTemplate::new(200).set_body_json(json!({"data": data}))
        })
        .mount(&provider)
        .await;
    provider
}

async fn secured() -> (TestServer, String) {
    let mut settings = test_settings();
    settings.auth.disabled = false;
    settings.auth.admin_api_key = Some(ADMIN_KEY.to_owned().into());
    settings.memory.embedder.openai.api_key = Some(PROVIDER_SECRET.to_owned().into());
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let reply = call(
        &server,
        ADMIN_KEY,
        Method::POST,
        "/api-keys",
        Some(json!({"label": "t", "role": "admin", "tenant": "acme"})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    (server, reply.body["key"].as_str().expect("key").to_owned())
}

/// The persisted runtime configuration as stored: the state file, or the `runtime_config` row
/// when the history is on Postgres.
async fn persisted_text(server: &TestServer) -> String {
    match (&server.database, server.kind) {
        (Some(database), StoreKind::Postgres) => {
            let stored = mem0_core::history::read_postgres_setting(&database.url, "runtime").await.expect("read");
            stored.expect("persisted in postgres").value
        }
        _ => std::fs::read_to_string(server.data_dir.join("runtime-config.json")).expect("persisted"),
    }
}

async fn still_works(server: &TestServer) {
    let reply = call(
        server,
        ADMIN_KEY,
        Method::POST,
        "/memories",
        Some(json!({"messages": [{"role": "user", "content": "I am allergic to peanuts"}], "user_id": "u", "infer": false})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn view_is_redacted_and_admin_only() {
    let (server, tenant_admin) = secured().await;
    let reply = call(&server, &tenant_admin, Method::GET, "/configure", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text = reply.body.to_string();
    assert!(!text.contains(PROVIDER_SECRET) && !text.contains(ADMIN_KEY), "no secrets: {text}");
    assert_eq!(reply.body["embedder"]["openai"]["api_key_configured"], true);
    assert_eq!(reply.body["embedder"]["dimension"], 384);
    let reply = call(&server, &tenant_admin, Method::GET, "/configure/providers", None).await;
    assert_eq!(reply.body["embedder"], json!(["local", "openai"]));
    // Only the global admin changes server-wide settings.
    let change = json!({"embedder": {"provider": "local"}});
    call(&server, &tenant_admin, Method::POST, "/configure", Some(change)).await.assert_error(403, "forbidden");
}

#[tokio::test]
async fn rejected_changes_leave_the_running_configuration() {
    let (server, _) = secured().await;
    let wrong_dimension = fake_provider(8).await;
    let cases = [
        json!({"embedder": {"openai": {"model": "m", "api_key": "sk-over-http"}}}),
        json!({"embedder": {"provider": "carrier-pigeon"}}),
        json!({"embedder": {"provider": "openai", "openai": {"model": "m", "base_url": "http://169.254.169.254/v1"}}}),
        json!({"embedder": {"provider": "openai", "openai": {"model": "m", "base_url": "http://metadata.google.internal/v1"}}}),
        json!({"embedder": {"provider": "openai", "openai": {"model": "m", "base_url": "http://127.0.0.1:9/v1"}}}),
        json!({"embedder": {"provider": "openai", "openai": {"model": "m", "base_url": format!("{}/v1", wrong_dimension.uri())}}}),
        json!({"embedder": {"provider": "local", "local": {"model_dir": "/nonexistent"}}}),
        json!({"vector_store": {"provider": "sqlite"}}),
        json!({}),
    ];
    for change in cases {
        let reply = call(&server, ADMIN_KEY, Method::POST, "/configure", Some(change.clone())).await;
        let message = reply.assert_error(400, "configuration_rejected");
        if change.to_string().contains(&wrong_dimension.uri()) {
            assert!(message.contains("384") && message.contains('8'), "names both dimensions: {message}");
        }
        still_works(&server).await;
    }
    let view = call(&server, ADMIN_KEY, Method::GET, "/configure", None).await;
    assert_eq!(view.body["embedder"]["provider"], "local");
    let mut settings = server.restart_settings();
    mem0_server::configure::apply_persisted(&mut settings).await.expect("apply");
    assert_eq!(settings.memory.embedder.provider, EmbedderProvider::Local, "nothing persisted");
}

#[tokio::test]
async fn good_changes_are_swapped_in_and_persisted_without_secrets() {
    let (server, _) = secured().await;
    let provider = fake_provider(384).await;
    let change = json!({"embedder": {"provider": "openai", "openai": {"model": "fake-384", "base_url": format!("{}/v1", provider.uri())}}});
    let reply = call(&server, ADMIN_KEY, Method::POST, "/configure", Some(change)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["embedder"]["model_id"], "fake-384");
    let before = provider.received_requests().await.map_or(0, |requests| requests.len());
    still_works(&server).await;
    let after = provider.received_requests().await.map_or(0, |requests| requests.len());
    assert!(after > before, "new requests use the new embedder");
    let persisted = persisted_text(&server).await;
    assert!(persisted.contains("fake-384") && !persisted.contains(PROVIDER_SECRET), "{persisted}");

    // A restart applies the persisted change.
    let mut settings = server.restart_settings();
    mem0_server::configure::apply_persisted(&mut settings).await.expect("apply");
    assert_eq!(settings.memory.embedder.provider, EmbedderProvider::Openai);
    assert_eq!(settings.memory.embedder.openai.model, "fake-384");
}

fn chat_reply(content: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}
    }))
}

#[tokio::test]
async fn the_llm_can_be_switched_on_at_runtime() {
    let (server, _tenant_admin) = secured().await;
    let conversation = json!({"messages": [{"role": "user", "content": "I live in Oslo"}], "user_id": "u"});
    call(&server, ADMIN_KEY, Method::POST, "/memories", Some(conversation.clone()))
        .await
        .assert_error(400, "llm_not_configured");

    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat_reply(r#"{"facts": [{"text": "User lives in Oslo"}]}"#))
        .mount(&llm)
        .await;
    // Rejected changes first: each leaves the server without an LLM.
    for bad in [
        json!({"llm": {"provider": "gemini"}}),
        json!({"llm": {"provider": "openai", "openai": {"model": "m", "api_key": "sk-nope"}}}),
        json!({"llm": {"provider": "openai", "openai": {"model": "m", "base_url": "http://169.254.169.254/v1"}}}),
        json!({"llm": {"provider": "openai", "openai": {"model": "m", "json_mode": "sometimes"}}}),
        json!({"llm": {"provider": "openai", "openai": {"model": "m", "temperature": 7.0}}}),
        json!({"extraction": {"context_messages": 500}}),
    ] {
        let reply = call(&server, ADMIN_KEY, Method::POST, "/configure", Some(bad.clone())).await;
        reply.assert_error(400, "configuration_rejected");
        call(&server, ADMIN_KEY, Method::POST, "/memories", Some(conversation.clone()))
            .await
            .assert_error(400, "llm_not_configured");
    }

    let change = json!({
        "llm": {"provider": "openai", "openai": {"model": "fake-chat", "base_url": format!("{}/v1", llm.uri()), "max_tokens": 500}},
        "extraction": {"custom_instructions": "Only places.", "context_messages": 5}
    });
    let reply = call(&server, ADMIN_KEY, Method::POST, "/configure", Some(change)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["llm"]["in_use"], json!({"provider": "openai", "model": "fake-chat"}));
    assert_eq!(reply.body["extraction"]["custom_instructions"], "Only places.");

    let added = call(&server, ADMIN_KEY, Method::POST, "/memories", Some(conversation)).await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert_eq!(added.body["results"][0]["memory"], "User lives in Oslo");
    let sent: Value = serde_json::from_slice(&llm.received_requests().await.unwrap_or_default()[0].body).expect("json");
    assert_eq!(sent["max_tokens"], 500);
    assert!(sent["messages"][1]["content"].as_str().is_some_and(|prompt| prompt.contains("Only places.")));

    let persisted = persisted_text(&server).await;
    let mut settings = server.restart_settings();
    mem0_server::configure::apply_persisted(&mut settings).await.expect("apply");
    assert_eq!(settings.memory.llm.provider, mem0_core::providers::llm::LlmProvider::Openai, "{persisted}");
    assert_eq!(settings.memory.llm.openai.model, "fake-chat");
    assert_eq!(settings.memory.extraction.context_messages, 5);
}
