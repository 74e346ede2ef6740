//! The filter language over HTTP, on search and list: typed comparisons, nesting, the `*` key test,
//! injection attempts, unknown operators, and filters that try to widen the scope.

use mem0_http_tests::TestServer;
use serde_json::{json, Value};

async fn seeded() -> TestServer {
    let server = TestServer::start().await;
    for (text, metadata) in [
        ("note alpha", json!({"n": 3, "flag": true, "tag": "red", "who": "Ann"})),
        ("note beta", json!({"n": 10, "flag": false, "tag": "blue"})),
        ("note gamma", json!({"n": "3", "flag": "true", "tag": "Red wine"})),
        ("note delta", json!({"n": 2.5, "tag": "green", "dotted.key": "yes"})),
    ] {
        server.add_texts("alice", &[text], metadata).await;
    }
    server.add_texts("bob", &["note of bob"], json!({"n": 3, "tag": "red"})).await;
    server
}

async fn matching(server: &TestServer, filters: Value) -> Vec<String> {
    let mut filters = filters;
    filters["user_id"] = json!("alice");
    let mut texts =
        server.search_texts(json!({"query": "note", "filters": filters, "top_k": 100, "threshold": 0.0})).await;
    texts.sort();
    // The same filter through the listing route must agree with search.
    let encoded = filters.to_string();
    let mut listed = server.list_texts(&format!("user_id=alice&filters={}", urlencode(&encoded))).await;
    listed.sort();
    assert_eq!(texts, listed, "search and list agree on {filters}");
    texts
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn comparisons_are_typed() {
    let server = seeded().await;
    assert_eq!(matching(&server, json!({"n": 3})).await, ["note alpha"], "3 is not \"3\"");
    assert_eq!(matching(&server, json!({"n": "3"})).await, ["note gamma"]);
    assert_eq!(
        matching(&server, json!({"n": {"gt": 2.9}})).await,
        ["note alpha", "note beta"],
        "numeric, not text order"
    );
    assert_eq!(matching(&server, json!({"n": {"lte": 3}})).await, ["note alpha", "note delta"]);
    assert_eq!(matching(&server, json!({"n": {"gte": 3, "lt": 10}})).await, ["note alpha"]);
    assert_eq!(matching(&server, json!({"flag": true})).await, ["note alpha"], "true is not \"true\"");
    assert_eq!(matching(&server, json!({"flag": false})).await, ["note beta"]);
    assert_eq!(matching(&server, json!({"flag": "true"})).await, ["note gamma"]);
    assert_eq!(matching(&server, json!({"n": [3, 10]})).await, ["note alpha", "note beta"]);
    assert_eq!(matching(&server, json!({"tag": {"in": ["red", "green"]}})).await, ["note alpha", "note delta"]);
}

#[tokio::test]
async fn negations_include_rows_without_the_key() {
    let server = seeded().await;
    assert_eq!(matching(&server, json!({"flag": {"ne": true}})).await, ["note beta", "note delta", "note gamma"]);
    assert_eq!(matching(&server, json!({"tag": {"nin": ["red", "blue"]}})).await, ["note delta", "note gamma"]);
    assert_eq!(matching(&server, json!({"who": {"ne": "Ann"}})).await, ["note beta", "note delta", "note gamma"]);
}

#[tokio::test]
async fn substring_and_key_exists() {
    let server = seeded().await;
    assert_eq!(matching(&server, json!({"tag": {"contains": "re"}})).await, ["note alpha", "note delta"]);
    assert_eq!(matching(&server, json!({"tag": {"icontains": "RED"}})).await, ["note alpha", "note gamma"]);
    assert_eq!(matching(&server, json!({"who": "*"})).await, ["note alpha"]);
    assert_eq!(matching(&server, json!({"dotted.key": "yes"})).await, ["note delta"], "a dotted key is one key");
    // LIKE metacharacters are literal.
    assert!(matching(&server, json!({"tag": {"contains": "%"}})).await.is_empty());
    assert!(matching(&server, json!({"tag": {"contains": "_"}})).await.is_empty());
}

#[tokio::test]
async fn logic_nests() {
    let server = seeded().await;
    let nested = json!({"OR": [
        {"AND": [{"n": {"gte": 3}}, {"NOT": [{"flag": false}]}]},
        {"AND": [{"tag": "green"}, {"OR": [{"n": 2.5}, {"n": 99}]}]}
    ]});
    assert_eq!(matching(&server, nested).await, ["note alpha", "note delta"]);
    assert_eq!(
        matching(&server, json!({"NOT": {"OR": [{"tag": "red"}, {"tag": "blue"}]}})).await,
        ["note delta", "note gamma"]
    );
    assert!(
        matching(&server, json!({"AND": [{"n": 3}, {"n": 10}]})).await.is_empty(),
        "two equalities on one key cannot both hold"
    );
    // Deep but bounded nesting works.
    let mut deep = json!({"tag": "red"});
    for _ in 0..10 {
        deep = json!({"AND": [deep]});
    }
    assert_eq!(matching(&server, deep).await, ["note alpha"]);
}

#[tokio::test]
async fn filters_cannot_widen_the_scope() {
    let server = seeded().await;
    let attempts = [
        json!({"user_id": "alice", "OR": [{"user_id": "bob"}, {"n": 3}]}),
        json!({"user_id": "alice", "OR": [{"user_id": {"in": ["bob", "alice"]}}]}),
        json!({"user_id": "alice", "NOT": [{"user_id": "alice"}]}),
        json!({"user_id": "alice", "user_id_extra": "*"}),
    ];
    for filters in attempts {
        let reply = server.post("/search", json!({"query": "note", "filters": filters, "threshold": 0.0})).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        for hit in reply.body["results"].as_array().expect("results") {
            assert_eq!(hit["user_id"], "alice", "{filters} leaked {hit}");
        }
    }
    // A wildcard scope id is refused, in filters and at the top level, on search and list.
    server
        .post("/search", json!({"query": "note", "filters": {"user_id": "*"}}))
        .await
        .assert_error(400, "validation_failed");
    server.post("/search", json!({"query": "note", "user_id": "*"})).await.assert_error(400, "validation_failed");
    server.get("/memories?user_id=*").await.assert_error(400, "validation_failed");
    server.get("/memories?user_id=%25").await.assert_error(400, "validation_failed");
    // Search without any scope is refused.
    server.post("/search", json!({"query": "note", "filters": {"n": 3}})).await.assert_error(400, "validation_failed");
}

#[tokio::test]
async fn bad_filters_are_400_naming_the_problem() {
    let server = seeded().await;
    let reply =
        server.post("/search", json!({"query": "note", "filters": {"user_id": "alice", "n": {"$gt": 1}}})).await;
    let message = reply.assert_error(400, "unsupported_filter_operator");
    assert!(message.contains("$gt"), "{message}");
    assert_eq!(reply.body["details"]["operator"], "$gt");
    for filters in [
        json!({"user_id": "alice", "bad key": 1}),
        json!({"user_id": "alice", "x'); drop table memories; --": 1}),
        json!({"user_id": "alice", "n": {"gt": true}}),
        json!({"user_id": "alice", "n": {"in": 3}}),
        json!({"user_id": "alice", "n": null}),
        json!({"user_id": "alice", "OR": []}),
        json!({"user_id": "alice", "created_at": {"gt": "not a date"}}),
        json!({"user_id": "alice", "created_at": "*"}),
        json!("user_id=alice"),
    ] {
        let reply = server.post("/search", json!({"query": "note", "filters": filters})).await;
        let message = reply.assert_error(400, "validation_failed");
        assert!(message.contains("filters"), "{message}");
    }
    // Injection attempts in values are just values.
    let hostile = "red' or '1'='1";
    assert!(matching(&server, json!({"tag": hostile})).await.is_empty());
    assert!(matching(&server, json!({"tag": {"contains": "') or 1=1 --"}})).await.is_empty());
    // The table is intact.
    assert_eq!(server.list_texts("user_id=alice").await.len(), 4);
    server.get("/memories?user_id=alice&filters=%7Bnot-json").await.assert_error(400, "validation_failed");
}

#[tokio::test]
async fn columns_and_timestamps_filter_too() {
    let server = TestServer::start().await;
    server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "old fact"}], "user_id": "u", "infer": false, "timestamp": "2020-06-01T00:00:00Z"}),
        )
        .await;
    server
        .post(
            "/memories",
            json!({"messages": [{"role": "assistant", "content": "new fact"}], "user_id": "u", "agent_id": "helper", "infer": false}),
        )
        .await;
    let query = |filters: Value| json!({"query": "fact", "filters": filters, "threshold": 0.0});
    assert_eq!(
        server.search_texts(query(json!({"user_id": "u", "created_at": {"lt": "2021-01-01"}}))).await,
        ["old fact"]
    );
    assert_eq!(server.search_texts(query(json!({"user_id": "u", "role": "assistant"}))).await, ["new fact"]);
    assert_eq!(server.search_texts(query(json!({"user_id": "u", "agent_id": {"ne": "helper"}}))).await, ["old fact"]);
}
