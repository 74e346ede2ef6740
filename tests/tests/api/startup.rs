//! Startup checks: a store written with one embedding dimension refuses an embedder of another,
//! with both numbers in the message, before the server takes any request.

use std::sync::Arc;

use mem0_core::history::HistoryStore;
use mem0_core::providers::embedder::{OpenAiEmbedder, OpenAiEmbedderConfig};
use mem0_core::store::SqliteStore;
use mem0_core::Memory;
use mem0_http_tests::local_embedder;
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn dimension_mismatch_is_a_startup_error_naming_both_numbers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let memories = dir.path().join("memories.db");
    let history = dir.path().join("history.db");
    let store = SqliteStore::open(&memories).await.expect("store");
    let memory =
        Memory::new(Arc::new(store), HistoryStore::open(&history).await.expect("history"), local_embedder().await)
            .await
            .expect("first start with the 384-d local model");
    drop(memory);

    let provider = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"data": [{"index": 0, "embedding": vec![0.5_f32; 1536]}]})),
        )
        .mount(&provider)
        .await;
    let remote = OpenAiEmbedder::connect(OpenAiEmbedderConfig {
        base_url: Some(format!("{}/v1", provider.uri())),
        ..OpenAiEmbedderConfig::default()
    })
    .await
    .expect("fake provider");
    let store = SqliteStore::open(&memories).await.expect("store");
    let error = Memory::new(Arc::new(store), HistoryStore::open(&history).await.expect("history"), Arc::new(remote))
        .await
        .expect_err("a 1536-d embedder on a 384-d store must not start");
    let message = error.to_string();
    assert!(message.contains("384") && message.contains("1536"), "{message}");
}

#[tokio::test]
async fn missing_model_is_a_clear_startup_error() {
    let mut settings = mem0_http_tests::test_settings();
    let dir = tempfile::tempdir().expect("temp dir");
    settings.memory.embedder.local.model_dir = dir.path().join("no-model-here");
    settings.memory.vector_store.sqlite.path = dir.path().join("memories.db");
    settings.memory.history.path = dir.path().join("history.db");
    let error = mem0_server::build_state(settings).await.expect_err("no model");
    let message = format!("{error:#}");
    assert!(message.contains("scripts/fetch-model.sh"), "{message}");
}
