//! `rerank: true` over REST: HTTP rerank APIs (Cohere and TEI request shapes) and the LLM
//! reranker reorder the fused candidates; any failure keeps the fused order with a warning.
//! The rerank APIs and the LLM are wiremock fakes; the server, stores and embedder are real.

use mem0_core::providers::llm::LlmProvider;
use mem0_core::providers::reranker::{RerankFormat, RerankerProvider};
use mem0_http_tests::{local_embedder, test_settings, TestServer};
use mem0_server::config::Settings;
use serde_json::{json, Value};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const NOTES: [&str; 3] = ["User is allergic to peanuts", "User lives in Lisbon", "User plays the cello"];

fn http_settings(fake: &MockServer, format: RerankFormat) -> Settings {
    let mut settings = test_settings();
    settings.memory.reranker.provider = RerankerProvider::Http;
    settings.memory.reranker.http.base_url = Some(format!("{}/v2", fake.uri()));
    settings.memory.reranker.http.api_key = Some("rr-secret-key".to_owned().into());
    settings.memory.reranker.http.format = format;
    settings.memory.reranker.http.retry.base_delay_ms = 10;
    settings
}

/// Scores documents by how early the text "cello" appears (any document with "cello" wins).
fn cello_first(documents: &[Value]) -> Vec<(usize, f64)> {
    documents
        .iter()
        .enumerate()
        .map(|(index, text)| (index, if text.as_str().unwrap_or("").contains("cello") { 0.97 } else { 0.05 }))
        .collect()
}

async fn search(server: &TestServer, rerank: bool) -> Value {
    let reply = server
        .post(
            "/search",
            json!({"query": "food allergies", "user_id": "u", "rerank": rerank, "threshold": 0.0, "top_k": 3}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

fn order(body: &Value) -> Vec<&str> {
    body["results"].as_array().expect("results").iter().map(|hit| hit["memory"].as_str().expect("text")).collect()
}

#[tokio::test]
async fn cohere_shaped_apis_reorder_the_results() {
    let fake = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v2/rerank"))
        .and(header("authorization", "Bearer rr-secret-key"))
        .respond_with(|request: &Request| {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let results: Vec<Value> = cello_first(body["documents"].as_array().map_or(&[][..], Vec::as_slice))
                .into_iter()
                .map(|(index, score)| json!({"index": index, "relevance_score": score}))
                .collect();
            ResponseTemplate::new(200).set_body_json(json!({"results": results}))
        })
        .mount(&fake)
        .await;
    let server = TestServer::start_with(http_settings(&fake, RerankFormat::Cohere), local_embedder().await).await;
    server.add_texts("u", &NOTES, json!({})).await;
    let fused = search(&server, false).await;
    assert_eq!(order(&fused)[0], "User is allergic to peanuts");
    assert!(fused["results"][0].get("rerank_score").is_none());
    let reranked = search(&server, true).await;
    assert_eq!(order(&reranked)[0], "User plays the cello", "{reranked}");
    let top = &reranked["results"][0];
    assert!((top["rerank_score"].as_f64().unwrap_or_default() - 0.97).abs() < 1e-6);
    assert!(top["score"].as_f64().is_some(), "the fused score stays");
    assert!(reranked.get("warnings").is_none());
    let sent: Value =
        serde_json::from_slice(&fake.received_requests().await.unwrap_or_default()[0].body).expect("json");
    assert_eq!(sent["query"], "food allergies");
    assert_eq!(sent["model"], "rerank-v3.5");
    assert_eq!(sent["documents"].as_array().map(Vec::len), Some(3));
}

#[tokio::test]
async fn tei_shaped_apis_reorder_the_results() {
    let fake = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v2/rerank"))
        .respond_with(|request: &Request| {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let results: Vec<Value> = cello_first(body["texts"].as_array().map_or(&[][..], Vec::as_slice))
                .into_iter()
                .map(|(index, score)| json!({"index": index, "score": score}))
                .collect();
            ResponseTemplate::new(200).set_body_json(results)
        })
        .mount(&fake)
        .await;
    let server = TestServer::start_with(http_settings(&fake, RerankFormat::Tei), local_embedder().await).await;
    server.add_texts("u", &NOTES, json!({})).await;
    assert_eq!(order(&search(&server, true).await)[0], "User plays the cello");
}

#[tokio::test]
async fn failures_keep_the_fused_order_with_a_warning() {
    for response in [
        ResponseTemplate::new(500),
        ResponseTemplate::new(401).set_body_json(json!({"message": "bad key rr-secret-key"})),
        ResponseTemplate::new(200).set_body_json(json!({"results": [{"index": 0, "relevance_score": 0.5}]})),
        ResponseTemplate::new(200).set_body_string("not json"),
    ] {
        let fake = MockServer::start().await;
        Mock::given(method("POST")).respond_with(response).mount(&fake).await;
        let server = TestServer::start_with(http_settings(&fake, RerankFormat::Cohere), local_embedder().await).await;
        server.add_texts("u", &NOTES, json!({})).await;
        let fused = search(&server, false).await;
        let fallback = search(&server, true).await;
        assert_eq!(order(&fallback), order(&fused));
        let warning = fallback["warnings"][0].as_str().expect("a warning");
        assert!(warning.contains("reranker failed") && !warning.contains("rr-secret-key"), "{warning}");
        assert!(fallback["results"][0].get("rerank_score").is_none());
    }
}

#[tokio::test]
async fn without_a_reranker_the_request_says_so() {
    let server = TestServer::start().await;
    server.add_texts("u", &NOTES, json!({})).await;
    let body = search(&server, true).await;
    assert_eq!(order(&body), order(&search(&server, false).await));
    assert!(body["warnings"][0].as_str().is_some_and(|warning| warning.contains("no reranker is configured")));
}

#[tokio::test]
async fn the_llm_reranker_grades_candidates_in_one_call() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(|request: &Request| {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let prompt = body["messages"][1]["content"].as_str().unwrap_or("").to_owned();
            // Grade 9 for the memory about the cello, 1 for the others, in the prompt's order.
            let grades: Vec<u32> = prompt
                .lines()
                .filter(|line| line.chars().next().is_some_and(|c| c.is_ascii_digit()))
                .map(|line| if line.contains("cello") { 9 } else { 1 })
                .collect();
            ResponseTemplate::new(200).set_body_json(json!({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": json!({"scores": grades}).to_string()}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10}
            }))
        })
        .mount(&llm)
        .await;
    let mut settings = test_settings();
    settings.memory.llm.provider = LlmProvider::Openai;
    settings.memory.llm.openai.base_url = Some(format!("{}/v1", llm.uri()));
    settings.memory.llm.openai.model = "fake".to_owned();
    settings.memory.reranker.provider = RerankerProvider::Llm;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    server.add_texts("u", &NOTES, json!({})).await;
    let body = search(&server, true).await;
    assert_eq!(order(&body)[0], "User plays the cello", "{body}");
    assert!((body["results"][0]["rerank_score"].as_f64().unwrap_or_default() - 0.9).abs() < 1e-6);
    assert_eq!(llm.received_requests().await.unwrap_or_default().len(), 1, "one call for all candidates");
}
