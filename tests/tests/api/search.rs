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
    // Values of the wrong type or out of their type's range are the same error as out-of-bounds ones.
    for (body, field) in [
        (json!({"user_id": "u"}), "query"),
        (json!({"query": "x", "user_id": "u", "top_k": "ten"}), "top_k"),
        (json!({"query": "x", "user_id": "u", "top_k": -1}), "top_k"),
        (json!({"query": "x", "user_id": "u", "top_k": 2.5}), "top_k"),
        (json!({"query": "x", "user_id": "u", "threshold": "high"}), "threshold"),
        (json!({"query": "x", "user_id": "u", "mode": "fuzzy"}), "mode"),
        (json!({"query": "x", "run_id": 5}), "run_id"),
        (json!({"query": "x", "user_id": "u", "agent_id": ["a"]}), "agent_id"),
    ] {
        let reply = server.post("/search", body.clone()).await;
        reply.assert_error(400, "validation_failed");
        assert_eq!(reply.body["details"]["field"], field, "{body}");
    }
    for raw in ["{\"query\": ", "not json", "{\"query\": \"x\"} trailing"] {
        let reply = server
            .client
            .post(format!("{}/search", server.base))
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .expect("send");
        mem0_http_tests::Reply::read_public(reply).await.assert_error(400, "invalid_json");
    }
    server.get("/memories?user_id=u&page_size=-1").await.assert_error(400, "validation_failed");
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

/// With default settings, everything dense search returns above the default threshold is also
/// returned by the default (hybrid) mode: a memory that matches only by meaning is not hidden by
/// the fused score being a weighted sum.
#[tokio::test]
async fn the_default_mode_returns_what_dense_search_returns() {
    let server = TestServer::start().await;
    server
        .add_texts(
            "u",
            &[
                "I work as a nurse at the city hospital",
                "My daughter Emma starts school in September",
                "We adopted a grey cat called Miso last spring",
                "I can't stand cilantro in my food",
                "The flight to Lisbon leaves at 7 in the morning",
                "I have been learning the cello for two years",
                "Our team uses Rust and Postgres for the backend",
            ],
            json!({}),
        )
        .await;
    let mut meaning_only = 0;
    for query in [
        "what is the user's job?",
        "does the user have kids?",
        "any pets at home?",
        "what should the user not eat?",
        "travel plans",
        "musical hobbies",
        "which programming languages",
    ] {
        let dense = server.search_texts(json!({"query": query, "user_id": "u", "top_k": 100, "mode": "dense"})).await;
        let reply =
            server.post("/search", json!({"query": query, "user_id": "u", "top_k": 100, "explain": true})).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let hybrid = mem0_http_tests::texts(&reply.body["results"]);
        for text in &dense {
            assert!(hybrid.contains(text), "{query}: dense returns `{text}`, hybrid does not: {hybrid:?}");
        }
        // Results kept for their meaning alone although their fused score is under the threshold.
        meaning_only += reply.body["results"]
            .as_array()
            .expect("results")
            .iter()
            .filter(|hit| hit["score"].as_f64().is_some_and(|score| score < 0.1))
            .count();
    }
    assert!(meaning_only > 0, "the queries exercise memories that match by meaning only");
    let job = server.search_texts(json!({"query": "what is the user's job?", "user_id": "u"})).await;
    assert!(job.contains(&"I work as a nurse at the city hospital".to_owned()), "{job:?}");
}
