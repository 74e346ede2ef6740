//! Search parameters: defaults, bounds, threshold and top_k behaviour, scope isolation.

use mem0_http_tests::TestServer;
use serde_json::json;

#[tokio::test]
async fn finds_by_meaning_not_by_words() {
    let server = TestServer::start().await;
    server
        .add_texts(
            "u",
            &["I am allergic to peanuts", "The weather in Oslo is cold in winter", "My daughter plays the violin"],
            json!({}),
        )
        .await;
    let hits =
        server.search_texts(json!({"query": "what food should the user avoid?", "user_id": "u", "top_k": 1})).await;
    assert_eq!(hits, ["I am allergic to peanuts"]);
    let hits = server
        .search_texts(json!({"query": "musical instrument lessons for the kid", "user_id": "u", "top_k": 1}))
        .await;
    assert_eq!(hits, ["My daughter plays the violin"]);
}

#[tokio::test]
async fn threshold_and_top_k() {
    let server = TestServer::start().await;
    server.add_texts("u", &["I am allergic to peanuts", "The weather is nice"], json!({})).await;
    let reply = server
        .post(
            "/search",
            json!({"query": "The user cannot eat peanuts", "user_id": "u", "threshold": 0.5, "mode": "dense"}),
        )
        .await;
    let results = reply.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{}", reply.body);
    assert!(results[0]["score"].as_f64().expect("score") >= 0.5);
    let reply = server.post("/search", json!({"query": "peanuts", "user_id": "u", "threshold": 0.0, "top_k": 1})).await;
    assert_eq!(reply.body["results"].as_array().map(Vec::len), Some(1));
    let scores: Vec<f64> =
        server.post("/search", json!({"query": "peanuts", "user_id": "u", "threshold": 0.0})).await.body["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|hit| hit["score"].as_f64().expect("score"))
            .collect();
    assert!(scores.windows(2).all(|pair| pair[0] >= pair[1]), "best first: {scores:?}");
}

#[tokio::test]
async fn bad_parameters_are_400() {
    let server = TestServer::start().await;
    for (body, field) in [
        (json!({"query": "", "user_id": "u"}), "query"),
        (json!({"query": "   ", "user_id": "u"}), "query"),
        (json!({"query": "x".repeat(9000), "user_id": "u"}), "query"),
        (json!({"query": "x", "user_id": "u", "top_k": 0}), "top_k"),
        (json!({"query": "x", "user_id": "u", "top_k": 1001}), "top_k"),
        (json!({"query": "x", "user_id": "u", "threshold": 1.5}), "threshold"),
        (json!({"query": "x", "user_id": "u", "threshold": -0.1}), "threshold"),
        (json!({"query": "x"}), "filters"),
    ] {
        let reply = server.post("/search", body.clone()).await;
        reply.assert_error(400, "validation_failed");
        assert_eq!(reply.body["details"]["field"], field, "{body}");
    }
    server.post("/search", json!({"user_id": "u"})).await.assert_error(400, "invalid_json");
    server
        .post("/search", json!({"query": "x", "user_id": "u", "top_k": "ten"}))
        .await
        .assert_error(400, "invalid_json");
}

#[tokio::test]
async fn agent_and_run_scopes_are_separate() {
    let server = TestServer::start().await;
    for (agent, run, text) in
        [("a1", "r1", "agent one run one"), ("a1", "r2", "agent one run two"), ("a2", "r1", "agent two run one")]
    {
        let reply = server
            .post("/memories", json!({"messages": [{"role": "user", "content": text}], "agent_id": agent, "run_id": run, "infer": false}))
            .await;
        assert_eq!(reply.status, 200);
    }
    let mut hits =
        server.search_texts(json!({"query": "agent", "filters": {"agent_id": "a1"}, "threshold": 0.0})).await;
    hits.sort();
    assert_eq!(hits, ["agent one run one", "agent one run two"]);
    let hits = server
        .search_texts(json!({"query": "agent", "filters": {"agent_id": "a1", "run_id": "r2"}, "threshold": 0.0}))
        .await;
    assert_eq!(hits, ["agent one run two"]);
}
