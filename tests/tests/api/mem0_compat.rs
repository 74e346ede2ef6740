//! Mem0's API dialect (`compat`) beyond what its SDKs exercise (scripts/clients.sh runs the
//! SDKs themselves): paths without the trailing slash, the older SDKs' response shapes, numbered
//! pages over thousands of memories, the error body the Python SDK reads, 501s, and that the
//! dialect shares our routes' idempotency.

use std::collections::HashSet;

use mem0_http_tests::{texts, TestServer};
use serde_json::{json, Value};

fn verbatim(user: &str, texts: &[String]) -> Value {
    let messages: Vec<Value> = texts.iter().map(|text| json!({"role": "user", "content": text})).collect();
    json!({"messages": messages, "user_id": user, "infer": false})
}

#[tokio::test]
async fn every_path_answers_with_and_without_its_slash_in_the_shape_of_its_version() {
    let server = TestServer::start().await;
    // v3 add: an object with the results; v1 add: the older SDKs' bare list.
    let v3 = server.post("/v3/memories/add", verbatim("ann", &["Ann keeps bees".into()])).await;
    assert_eq!(v3.status, 200, "{}", v3.body);
    assert_eq!(
        (v3.body["status"].clone(), texts(&v3.body["results"])),
        (json!("SUCCEEDED"), vec!["Ann keeps bees".to_owned()])
    );
    let v1 = server.post("/v1/memories/", verbatim("ann", &["Ann grows tomatoes".into()])).await;
    assert_eq!(v1.status, 200, "{}", v1.body);
    assert_eq!(v1.body[0]["data"]["memory"], "Ann grows tomatoes", "{}", v1.body);
    let wrapped = server
        .post(
            "/v1/memories",
            json!({"messages": "Ann likes honey", "user_id": "ann", "infer": false, "output_format": "v1.1"}),
        )
        .await;
    assert_eq!(texts(&wrapped.body["results"]), ["Ann likes honey"], "{}", wrapped.body);

    // Searches: v3 wraps; v2 and v1 answer a bare list unless asked for v1.1.
    let query = json!({"query": "what does Ann keep?", "filters": {"user_id": "ann"}, "top_k": 1});
    let v3 = server.post("/v3/memories/search", query.clone()).await;
    assert_eq!(texts(&v3.body["results"]), ["Ann keeps bees"], "{}", v3.body);
    let v2 = server.post("/v2/memories/search/", query.clone()).await;
    assert_eq!(texts(&v2.body), ["Ann keeps bees"], "{}", v2.body);
    let v1 = server
        .post(
            "/v1/memories/search/",
            json!({"query": "what does Ann keep?", "user_id": "ann", "top_k": 1, "output_format": "v1.1"}),
        )
        .await;
    assert_eq!(texts(&v1.body["results"]), ["Ann keeps bees"], "{}", v1.body);
    assert_eq!(v1.body["results"][0]["session_id"], Value::Null);
    assert_eq!(v1.body["results"][0]["categories"], json!([]));

    // Mem0's wildcard: `"*"` is any value (here: memories that have a run).
    let in_a_run = server
        .post(
            "/v1/memories/",
            json!({"messages": "Ann's bees swarmed today", "user_id": "ann", "run_id": "r1", "infer": false}),
        )
        .await;
    assert_eq!(in_a_run.status, 200, "{}", in_a_run.body);
    let wild = server
        .post(
            "/v3/memories/search/",
            json!({"query": "bees", "filters": {"AND": [{"user_id": "ann"}, {"run_id": "*"}]}}),
        )
        .await;
    assert_eq!(texts(&wild.body["results"]), ["Ann's bees swarmed today"], "{}", wild.body);
    let listed = server.post("/v3/memories/", json!({"filters": {"user_id": "ann", "run_id": "*"}})).await;
    assert_eq!(listed.body["count"], 1, "{}", listed.body);
    server.delete("/v1/memories/?user_id=ann&run_id=r1").await;

    // The v1 listing: a bare list, or the numbered envelope with page and page_size.
    let bare = server.get("/v1/memories?user_id=ann").await;
    assert_eq!(bare.body.as_array().map(Vec::len), Some(3), "{}", bare.body);
    let paged = server.get("/v1/memories/?user_id=ann&page=1&page_size=2").await;
    assert_eq!((paged.body["count"].clone(), paged.body["results"].as_array().map(Vec::len)), (json!(3), Some(2)));
    assert_eq!(paged.body["next"], "/v1/memories/?page=2&page_size=2");

    // One memory, its history, then the scope, each without the slash.
    let id = v3.body["results"][0]["id"].as_str().expect("id").to_owned();
    assert_eq!(server.get(&format!("/v1/memories/{id}")).await.body["memory"], "Ann keeps bees");
    assert_eq!(server.get(&format!("/v1/memories/{id}/history")).await.body[0]["event"], "ADD");
    let gone = server.delete("/v1/memories?user_id=ann").await;
    assert_eq!(gone.body["deleted"], 3, "{}", gone.body);
}

#[tokio::test]
async fn numbered_pages_cover_thousands_of_memories_exactly_once() {
    let server = TestServer::start().await;
    let total = 1_200;
    for batch in 0..total / 100 {
        let texts: Vec<String> = (0..100).map(|i| format!("Note {} about the garden", batch * 100 + i)).collect();
        let reply = server.post("/v3/memories/add/", verbatim("gardener", &texts)).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let mut seen = Vec::new();
    let mut path = "/v3/memories/?page=1&page_size=500".to_owned();
    loop {
        let page = server.post(&path, json!({"filters": {"user_id": "gardener"}})).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert_eq!(page.body["count"], total);
        seen.extend(page.body["results"].as_array().expect("results").iter().map(|item| item["id"].clone()));
        match page.body["next"].as_str() {
            Some(next) => path = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen.len(), total);
    assert_eq!(seen.iter().map(Value::to_string).collect::<HashSet<_>>().len(), total, "no memory twice");
    // The same order as our cursor listing.
    let mut cursor_ids = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let query = next.as_ref().map_or(String::new(), |cursor| format!("&cursor={cursor}"));
        let page = server.get(&format!("/memories?user_id=gardener&page_size=1000{query}")).await;
        cursor_ids.extend(page.body["results"].as_array().expect("results").iter().map(|item| item["id"].clone()));
        next = page.body["next"].as_str().map(str::to_owned);
        if next.is_none() {
            break;
        }
    }
    assert_eq!(seen, cursor_ids);
    // A page past the end is empty, and says where the last one is.
    let past = server.post("/v3/memories/?page=4&page_size=500", json!({"filters": {"user_id": "gardener"}})).await;
    assert_eq!(past.status, 200, "{}", past.body);
    assert_eq!((past.body["results"].clone(), past.body["next"].clone()), (json!([]), Value::Null));
    assert_eq!(past.body["previous"], "/v3/memories/?page=3&page_size=500");
    // Dates and metadata narrow the listing as in Mem0.
    let none =
        server.post("/v3/memories/", json!({"filters": {"user_id": "gardener"}, "end_date": "2000-01-01"})).await;
    assert_eq!(none.body["count"], 0, "{}", none.body);
    // An end day covers that whole day: today's memories are listed up to today.
    let today = chrono::Utc::now().date_naive().format("%Y-%m-%d").to_string();
    let all = server.post("/v3/memories/", json!({"filters": {"user_id": "gardener"}})).await;
    let until_today =
        server.post("/v3/memories/", json!({"filters": {"user_id": "gardener"}, "end_date": today})).await;
    assert_eq!(until_today.body["count"], all.body["count"], "{}", until_today.body);
    assert!(all.body["count"].as_u64().is_some_and(|count| count > 0));
}

#[tokio::test]
async fn errors_carry_mem0s_detail_and_missing_features_are_501() {
    let server = TestServer::start().await;
    let bad = server.get("/v1/memories/not-a-uuid/").await;
    let message = bad.assert_error(400, "invalid_memory_id");
    assert_eq!(bad.body["detail"], message, "the Python SDK shows `detail`");
    let missing = server.get(&format!("/v1/memories/{}/", uuid::Uuid::now_v7())).await;
    missing.assert_error(404, "memory_not_found");
    assert!(missing.body["detail"].is_string());
    for (method, path, body, feature) in [
        (reqwest::Method::POST, "/v1/exports/", Some(json!({})), "Mem0's export jobs"),
        (reqwest::Method::PUT, "/v1/batch/", Some(json!({"memories": []})), "batch updates and deletes"),
        (reqwest::Method::GET, "/v1/events/", None, "listing events"),
        (
            reqwest::Method::POST,
            "/v3/memories/add/",
            Some(json!({"messages": "x", "user_id": "a", "immutable": true})),
            "immutable memories",
        ),
        (
            reqwest::Method::POST,
            "/v3/memories/search/",
            Some(json!({"query": "x", "filters": {"user_id": "a", "categories": {"in": ["x"]}}})),
            "filtering by categories",
        ),
        (
            reqwest::Method::PUT,
            &format!("/v1/memories/{}/", uuid::Uuid::now_v7()),
            Some(json!({"timestamp": 1})),
            "changing a memory's timestamp",
        ),
    ] {
        let reply = server.call(method, path, body).await;
        let message = reply.assert_error(501, "not_implemented");
        assert_eq!(
            reply.body["details"]["feature"].as_str().map(|name| message.contains(name)),
            Some(true),
            "{}",
            reply.body
        );
        assert!(
            reply.body["details"]["feature"].as_str().is_some_and(|name| name.starts_with(feature)),
            "{path}: {}",
            reply.body
        );
    }
    // Our own routes keep their envelope as it was.
    let ours = server.get("/memories/not-a-uuid").await;
    ours.assert_error(400, "invalid_memory_id");
    assert!(ours.body.get("detail").is_none());
}

#[tokio::test]
async fn an_idempotency_key_replays_a_mem0_add() {
    let server = TestServer::start().await;
    let send = || async {
        let response = server
            .client
            .post(format!("{}/v3/memories/add/", server.base))
            .header("idempotency-key", "mem0-add-1")
            .json(&verbatim("ida", &["Ida sails on Sundays".into()]))
            .send()
            .await
            .expect("request");
        let body: Value = response.json().await.expect("json");
        body["results"][0]["id"].clone()
    };
    let first = send().await;
    assert_eq!(send().await, first, "the retry gets the first answer");
    assert_eq!(server.list_texts("user_id=ida").await, ["Ida sails on Sundays"], "stored once");
}
