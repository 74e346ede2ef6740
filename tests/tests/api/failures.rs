//! Failures of the embedding provider and of the history volume: the caller gets a classified
//! 5xx and the stores are exactly as before. The provider is a wiremock fake speaking the OpenAI
//! `/v1/embeddings` wire format, driven by the real client.

use std::sync::Arc;
use std::time::Duration;

use mem0_core::providers::embedder::{OpenAiEmbedder, OpenAiEmbedderConfig};
use mem0_http_tests::{test_settings, TestServer};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// A deterministic 8-dimensional embedding of a text (word-bucket counts).
fn fake_vector(text: &str) -> Vec<f32> {
    let mut vector = vec![0.01_f32; 8];
    for word in text.split_whitespace() {
        let bucket = word.bytes().map(usize::from).sum::<usize>() % 8;
        vector[bucket] += 1.0;
    }
    vector
}

fn embeddings_ok(request: &Request) -> ResponseTemplate {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let data: Vec<Value> = body["input"]
        .as_array()
        .map(|inputs| {
            inputs
                .iter()
                .enumerate()
                .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": fake_vector(text.as_str().unwrap_or(""))}))
                .collect()
        })
        .unwrap_or_default();
    ResponseTemplate::new(200).set_body_json(json!({"object": "list", "data": data, "model": "fake"}))
}

async fn start_with_fake_provider() -> (TestServer, MockServer) {
    let provider = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/embeddings")).respond_with(embeddings_ok).mount(&provider).await;
    let embedder = OpenAiEmbedder::connect(OpenAiEmbedderConfig {
        base_url: Some(format!("{}/v1", provider.uri())),
        api_key: Some("sk-secret-test-key".to_owned().into()),
        model: "fake".to_owned(),
        timeout_secs: 1,
        ..OpenAiEmbedderConfig::default()
    })
    .await
    .expect("connect to the fake provider");
    let server = TestServer::start_with(test_settings(), Arc::new(embedder)).await;
    (server, provider)
}

async fn fail_provider_with(provider: &MockServer, response: ResponseTemplate) {
    provider.reset().await;
    Mock::given(method("POST")).respond_with(response).mount(provider).await;
}

#[tokio::test]
async fn provider_failures_are_classified_and_write_nothing() {
    let (server, provider) = start_with_fake_provider().await;
    let id = server.add_texts("u", &["keeps working"], json!({})).await.remove(0);
    let before = server.list_texts("user_id=u&show_expired=true").await;

    let cases = [
        (ResponseTemplate::new(401), 502, "provider_auth_failed"),
        (ResponseTemplate::new(429).insert_header("retry-after", "9"), 503, "provider_rate_limited"),
        (ResponseTemplate::new(500), 503, "provider_unavailable"),
        (ResponseTemplate::new(400), 502, "provider_bad_request"),
        (ResponseTemplate::new(200).set_body_string("not json"), 502, "provider_bad_response"),
        (embeddings_ok_delayed(), 504, "provider_timeout"),
    ];
    for (response, status, code) in cases {
        fail_provider_with(&provider, response).await;
        let reply = server
            .post("/memories", json!({"messages": [{"role": "user", "content": "should not be stored"}], "user_id": "u", "infer": false}))
            .await;
        let message = reply.assert_error(status, code);
        assert!(!message.contains("sk-secret-test-key"), "no secret in {message}");
        if code == "provider_rate_limited" {
            assert_eq!(reply.headers["retry-after"], "9");
        }
        let reply = server.post("/search", json!({"query": "anything", "user_id": "u"})).await;
        reply.assert_error(status, code);
        let reply = server.put(&format!("/memories/{id}"), json!({"text": "changed text"})).await;
        reply.assert_error(status, code);
    }
    assert_eq!(server.list_texts("user_id=u&show_expired=true").await, before, "nothing was written");
    let history = server.get(&format!("/memories/{id}/history")).await;
    assert_eq!(history.body.as_array().map(Vec::len), Some(1), "no UPDATE was recorded: {}", history.body);

    // A metadata-only update needs no embedding and still works.
    let reply = server.put(&format!("/memories/{id}"), json!({"metadata": {"k": 1}})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

fn embeddings_ok_delayed() -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_json(json!({"object": "list", "data": [{"index": 0, "embedding": fake_vector("x")}]}))
        .set_delay(Duration::from_secs(3))
}

async fn drop_history_table(server: &TestServer) {
    server.history_sql("drop table history", "drop table history").await;
}

/// A broken history volume (its table dropped under the server) is an internal error, not an
/// outage: 500, and every write undone.
#[tokio::test]
async fn history_failure_undoes_the_memory_write() {
    let server = TestServer::start().await;
    let kept = server.add_texts("u", &["kept memory"], json!({"v": 1})).await.remove(0);
    let doomed = server.add_texts("u", &["another memory"], json!({})).await.remove(0);
    drop_history_table(&server).await;

    let reply = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "never stored"}], "user_id": "u", "infer": false}),
        )
        .await;
    reply.assert_error(500, "internal_error");
    let reply = server.put(&format!("/memories/{kept}"), json!({"text": "rewritten", "metadata": {"v": 2}})).await;
    reply.assert_error(500, "internal_error");
    let reply = server.delete(&format!("/memories/{doomed}")).await;
    reply.assert_error(500, "internal_error");
    let reply = server.delete("/memories?user_id=u").await;
    reply.assert_error(500, "internal_error");

    let mut texts = server.list_texts("user_id=u").await;
    texts.sort();
    assert_eq!(texts, ["another memory", "kept memory"], "adds, updates and deletes were undone");
    let kept = server.get(&format!("/memories/{kept}")).await;
    assert_eq!(kept.body["memory"], "kept memory");
    assert_eq!(kept.body["metadata"], json!({"v": 1}));
    // Its embedding was restored too: by meaning alone it is "kept memory", not "rewritten".
    let reply =
        server.post("/search", json!({"query": "kept memory", "user_id": "u", "top_k": 1, "mode": "dense"})).await;
    assert_eq!(reply.body["results"][0]["memory"], "kept memory", "{}", reply.body);
    assert!(reply.body["results"][0]["score"].as_f64().unwrap_or_default() > 0.99, "{}", reply.body);
}
