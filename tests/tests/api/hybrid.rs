//! Hybrid retrieval through the HTTP API: BM25 over the caller's scope finds what embeddings
//! miss, scores stay in [0, 1] with explainable parts, and every retriever honours scope, filters
//! and expiration. Real server, real SQLite, real MiniLM embedder.

use mem0_http_tests::TestServer;
use serde_json::{json, Value};

async fn search(server: &TestServer, body: Value) -> Vec<Value> {
    let reply = server.post("/search", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["results"].as_array().expect("results").clone()
}

fn texts(results: &[Value]) -> Vec<&str> {
    results.iter().map(|hit| hit["memory"].as_str().expect("text")).collect()
}

const NOTES: [&str; 6] = [
    "Deploy of the billing service is blocked by ticket ZX-4821",
    "The user enjoys hiking in the Alps during summer",
    "User prefers oat milk in coffee",
    "The team retrospective happens every second Friday",
    "User's favourite author is Ursula K. Le Guin",
    "The user's cat is called Miso",
];

#[tokio::test]
async fn keyword_matches_reach_the_results_with_explained_scores() {
    let server = TestServer::start().await;
    server.add_texts("u", &NOTES, json!({})).await;
    // A rare identifier: BM25 finds it; with keyword mode it is the only hit.
    let keyword =
        search(&server, json!({"query": "ZX-4821", "user_id": "u", "mode": "keyword", "threshold": 0.0})).await;
    assert_eq!(texts(&keyword), ["Deploy of the billing service is blocked by ticket ZX-4821"]);
    assert!(keyword[0]["score"].as_f64().is_some_and(|score| score > 0.5 && score <= 1.0), "{keyword:?}");

    let hybrid = search(
        &server,
        json!({"query": "what is ZX-4821 about?", "user_id": "u", "explain": true, "threshold": 0.0, "top_k": 3}),
    )
    .await;
    assert_eq!(hybrid[0]["memory"], "Deploy of the billing service is blocked by ticket ZX-4821");
    for hit in &hybrid {
        let explain = &hit["explain"];
        let parts = &explain["contributions"];
        let sum = parts["semantic"].as_f64().unwrap_or_default()
            + parts["keyword"].as_f64().unwrap_or_default()
            + parts["entity"].as_f64().unwrap_or_default();
        let score = hit["score"].as_f64().expect("score");
        assert!((sum - score).abs() < 1e-4, "contributions add up to the score: {hit}");
        for signal in ["semantic", "keyword", "entity"] {
            let value = explain[signal].as_f64().expect("signal");
            assert!((0.0..=1.0).contains(&value), "{signal} in [0, 1]: {hit}");
        }
    }
    let top = &hybrid[0]["explain"];
    assert!(top["keyword"].as_f64().is_some_and(|keyword| keyword > 0.0), "{top}");
    assert!(top["bm25"].as_f64().is_some_and(|bm25| bm25 > 0.0), "{top}");
    assert!(top["sources"].as_array().is_some_and(|sources| sources.contains(&json!("keyword"))), "{top}");
    // Without explain, no explain field.
    let plain = search(&server, json!({"query": "ZX-4821", "user_id": "u"})).await;
    assert!(plain[0].get("explain").is_none());
}

#[tokio::test]
async fn a_keyword_only_match_is_returned_when_dense_ranks_it_out() {
    let server = TestServer::start().await;
    // Many memories about coffee; one mentions an unusual word the query shares.
    let mut notes: Vec<String> =
        (0..30).map(|index| format!("User drank coffee number {index} at the office")).collect();
    notes.push("Quokka stickers are on the user's laptop".to_owned());
    let refs: Vec<&str> = notes.iter().map(String::as_str).collect();
    server.add_texts("u", &refs, json!({})).await;
    let query = json!({"query": "coffee quokka", "user_id": "u", "top_k": 5, "threshold": 0.0});
    let mut dense_query = query.clone();
    dense_query["mode"] = json!("dense");
    let dense = search(&server, dense_query).await;
    let hybrid = search(&server, query).await;
    assert!(texts(&hybrid).contains(&"Quokka stickers are on the user's laptop"), "hybrid: {:?}", texts(&hybrid));
    assert!(
        !texts(&dense).contains(&"Quokka stickers are on the user's laptop"),
        "dense alone misses it: {:?}",
        texts(&dense)
    );
}

#[tokio::test]
async fn every_retriever_honours_scope_filters_and_expiration() {
    let server = TestServer::start().await;
    server.add_texts("alice", &["Alice keeps bees on her roof"], json!({"topic": "hobby"})).await;
    server.add_texts("alice", &["Alice's bees produced honey in June"], json!({"topic": "food"})).await;
    server.add_texts("bob", &["Bob keeps bees too"], json!({"topic": "hobby"})).await;
    let expired = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "Alice sold her bees"}], "user_id": "alice",
                   "infer": false, "expiration_date": "2001-01-01"}),
        )
        .await;
    assert_eq!(expired.status, 200);
    for mode in ["hybrid", "dense", "keyword"] {
        let all = search(&server, json!({"query": "bees", "user_id": "alice", "mode": mode, "threshold": 0.0})).await;
        let mut found = texts(&all);
        found.sort_unstable();
        assert_eq!(found, ["Alice keeps bees on her roof", "Alice's bees produced honey in June"], "{mode}");
        let filtered = search(
            &server,
            json!({"query": "bees", "filters": {"user_id": "alice", "topic": "food"}, "mode": mode, "threshold": 0.0}),
        )
        .await;
        assert_eq!(texts(&filtered), ["Alice's bees produced honey in June"], "{mode}");
        let with_expired = search(
            &server,
            json!({"query": "sold bees", "user_id": "alice", "mode": mode, "threshold": 0.0, "show_expired": true}),
        )
        .await;
        assert!(texts(&with_expired).contains(&"Alice sold her bees"), "{mode}");
    }
}

#[tokio::test]
async fn chinese_memories_get_keyword_hits() {
    let server = TestServer::start().await;
    server.add_texts("hui", &["我下个月要去成都出差", "我喜欢喝绿茶", "周末去爬山"], json!({})).await;
    let hits = search(&server, json!({"query": "成都", "user_id": "hui", "mode": "keyword", "threshold": 0.0})).await;
    assert_eq!(texts(&hits), ["我下个月要去成都出差"]);
    let hybrid = search(&server, json!({"query": "出差去哪里", "user_id": "hui", "top_k": 1, "threshold": 0.0})).await;
    assert_eq!(texts(&hybrid), ["我下个月要去成都出差"]);
}

#[tokio::test]
async fn updates_and_deletes_reach_the_keyword_index() {
    let server = TestServer::start().await;
    let ids = server.add_texts("u", &["User owns a red kayak"], json!({})).await;
    let keyword = json!({"query": "kayak", "user_id": "u", "mode": "keyword", "threshold": 0.0});
    assert_eq!(search(&server, keyword.clone()).await.len(), 1);
    let reply = server.put(&format!("/memories/{}", ids[0]), json!({"text": "User owns a blue canoe"})).await;
    assert_eq!(reply.status, 200);
    assert!(search(&server, keyword).await.is_empty(), "the old text no longer matches");
    let canoe = json!({"query": "canoe", "user_id": "u", "mode": "keyword", "threshold": 0.0});
    assert_eq!(search(&server, canoe.clone()).await.len(), 1);
    server.delete(&format!("/memories/{}", ids[0])).await;
    assert!(search(&server, canoe).await.is_empty());
}

#[tokio::test]
async fn unknown_modes_are_rejected() {
    let server = TestServer::start().await;
    let reply = server.post("/search", json!({"query": "x", "user_id": "u", "mode": "magic"})).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
}

#[tokio::test]
async fn named_entities_are_linked_and_boost_their_memories() {
    let server = TestServer::start().await;
    let ids = server
        .add_texts(
            "u",
            &[
                "Caroline moved to Sweden in 2019",
                "User went to a pottery class on Tuesday",
                "Melanie ran a charity race for mental health",
            ],
            json!({}),
        )
        .await;
    let memory = server.get(&format!("/memories/{}", ids[0])).await;
    assert_eq!(memory.body["entities"], json!(["Caroline", "Sweden"]), "{}", memory.body);

    let hits = search(
        &server,
        json!({"query": "Where does Caroline live?", "user_id": "u", "explain": true, "threshold": 0.0}),
    )
    .await;
    assert_eq!(hits[0]["memory"], "Caroline moved to Sweden in 2019");
    let explain = &hits[0]["explain"];
    assert!(explain["entity"].as_f64().is_some_and(|entity| entity > 0.9), "{explain}");
    assert!(explain["sources"].as_array().is_some_and(|sources| sources.contains(&json!("entity"))), "{explain}");
    let others: Vec<&Value> = hits.iter().skip(1).collect();
    assert!(others.iter().all(|hit| hit["explain"]["entity"] == 0.0), "{others:?}");

    // Updating the text re-links: Caroline is gone, Oslo arrives.
    let reply = server.put(&format!("/memories/{}", ids[0]), json!({"text": "Jonas moved to Oslo in 2019"})).await;
    assert_eq!(reply.body["result"]["entities"], json!(["Jonas", "Oslo"]), "{}", reply.body);
    let stored = server.get(&format!("/memories/{}", ids[0])).await;
    assert_eq!(stored.body["entities"], json!(["Jonas", "Oslo"]), "the update is stored: {}", stored.body);
    let hits = search(&server, json!({"query": "Caroline", "user_id": "u", "explain": true, "threshold": 0.0})).await;
    assert!(hits.iter().all(|hit| hit["explain"]["entity"] == 0.0), "{hits:?}");
    let hits = search(&server, json!({"query": "Jonas", "user_id": "u", "explain": true, "threshold": 0.0})).await;
    assert_eq!(hits[0]["memory"], "Jonas moved to Oslo in 2019");
    assert!(hits[0]["explain"]["entity"].as_f64().is_some_and(|entity| entity > 0.9));
    // Deleting the memory removes its links.
    server.delete(&format!("/memories/{}", ids[0])).await;
    let hits = search(&server, json!({"query": "Jonas", "user_id": "u", "explain": true, "threshold": 0.0})).await;
    assert!(hits.iter().all(|hit| hit["explain"]["entity"] == 0.0), "{hits:?}");
}
