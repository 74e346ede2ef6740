//! Token accounting: every LLM call made for a tenant (extraction, rerank) is counted per day,
//! provider, model and purpose with the tokens the provider reported, and read back by the
//! tenant's admin with `GET /usage`.

use mem0_core::providers::reranker::RerankerProvider;
use mem0_http_tests::{local_embedder, settings_with_fake_llm, TestServer};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// An OpenAI-compatible fake: grades for a rerank prompt (100 + 10 tokens), one fact for an
/// extraction (800 + 60 tokens).
fn reply(request: &Request) -> ResponseTemplate {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    let (content, prompt_tokens, completion_tokens) = if system.contains("relevance grade") {
        let prompt = body["messages"][1]["content"].as_str().unwrap_or_default();
        let grades: Vec<u32> =
            prompt.lines().filter(|line| line.chars().next().is_some_and(|c| c.is_ascii_digit())).map(|_| 5).collect();
        (json!({"scores": grades}).to_string(), 100, 10)
    } else {
        let fact = json!({"text": "User keeps bees", "attributed_to": "user", "entities": []});
        (json!({"facts": [fact]}).to_string(), 800, 60)
    };
    ResponseTemplate::new(200).set_body_json(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    }))
}

#[tokio::test]
async fn llm_calls_are_counted_per_day_model_and_purpose() {
    let llm = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(reply).mount(&llm).await;
    let mut settings = settings_with_fake_llm(&llm.uri());
    settings.memory.reranker.provider = RerankerProvider::Llm;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    for text in ["I keep bees in the garden", "Honey harvest is in August"] {
        let reply =
            server.post("/memories", json!({"messages": [{"role": "user", "content": text}], "user_id": "u"})).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let search = server.post("/search", json!({"query": "bees", "user_id": "u", "rerank": true})).await;
    assert_eq!(search.status, 200, "{}", search.body);
    assert!(search.body["results"][0]["rerank_score"].is_number(), "reranked: {}", search.body);
    server.flush_usage().await;

    let usage = server.get("/usage").await;
    assert_eq!(usage.status, 200, "{}", usage.body);
    let today = chrono::Utc::now().date_naive().to_string();
    let row = |purpose: &str, calls: u64, prompt: u64, completion: u64| {
        json!({"day": today, "provider": "openai", "model": "fake-chat", "purpose": purpose, "calls": calls,
               "prompt_tokens": prompt, "completion_tokens": completion})
    };
    assert_eq!(usage.body["results"], json!([row("extraction", 2, 1_600, 120), row("rerank", 1, 100, 10)]));
    assert_eq!(usage.body["totals"], json!({"calls": 3, "prompt_tokens": 1_700, "completion_tokens": 130}));
    assert_eq!(usage.body["tenant"], "default");

    // A period without calls; a reset of the memories keeps what was spent.
    let before = server.get("/usage?from=2020-01-01&to=2020-01-31").await;
    assert_eq!(before.body["results"], json!([]), "{}", before.body);
    assert_eq!(server.post("/reset", json!({})).await.status, 200);
    assert_eq!(server.get("/usage").await.body["totals"]["calls"], 3);

    for (query, field) in [
        ("from=2026-13-01", "from"),
        ("to=yesterday", "to"),
        ("from=2026-02-01&to=2026-01-01", "from"),
        ("from=2020-01-01&to=2026-01-01", "from"),
    ] {
        let reply = server.get(&format!("/usage?{query}")).await;
        reply.assert_error(400, "validation_failed");
        assert_eq!(reply.body["details"]["field"], field, "{query}: {}", reply.body);
    }
}
