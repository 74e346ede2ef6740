//! The memory routes end to end: the documented curl session, every error case, expiration,
//! scoped deletes, reset and the cross-cutting behaviour (request ids, JSON errors).

use mem0_http_tests::{texts, TestServer};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn add_search_get_update_history_delete_session() {
    let server = TestServer::start().await;
    let added = server
        .post(
            "/memories",
            json!({
                "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "I am allergic to peanuts", "name": "alice-phone"},
                    {"role": "assistant", "content": "Noted, I will keep that in mind."}
                ],
                "user_id": "alice",
                "infer": false,
                "metadata": {"topic": "health"}
            }),
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    let results = added.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "system messages are not stored");
    assert_eq!(results[0]["event"], "ADD");
    assert_eq!(results[0]["role"], "user");
    assert_eq!(results[0]["actor_id"], "alice-phone");
    assert_eq!(results[1]["role"], "assistant");
    let id = results[0]["id"].as_str().expect("id").to_owned();

    // Other users' memories must not interfere.
    server.add_texts("bob", &["I love peanut butter sandwiches"], json!({})).await;

    let found = server
        .post("/search", json!({"query": "what food should the user avoid?", "filters": {"user_id": "alice"}}))
        .await;
    assert_eq!(found.status, 200, "{}", found.body);
    let hits = found.body["results"].as_array().expect("results");
    assert!(hits.iter().any(|hit| hit["memory"] == "I am allergic to peanuts"), "{}", found.body);
    assert!(hits.iter().all(|hit| hit["user_id"] == "alice"), "search stays in the scope");
    let score = hits[0]["score"].as_f64().expect("score");
    assert!((0.0..=1.0).contains(&score));

    let got = server.get(&format!("/memories/{id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["memory"], "I am allergic to peanuts");
    assert_eq!(got.body["hash"], "ad2bee22f9ad63b91d024b582b383a24");
    assert_eq!(got.body["metadata"], json!({"topic": "health"}));
    assert_eq!(got.body["user_id"], "alice");

    let updated = server
        .put(
            &format!("/memories/{id}"),
            json!({"text": "I am severely allergic to peanuts and tree nuts", "metadata": {"severity": "high"}}),
        )
        .await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    assert_eq!(updated.body["result"]["metadata"], json!({"topic": "health", "severity": "high"}), "metadata merges");

    let history = server.get(&format!("/memories/{id}/history")).await;
    assert_eq!(history.status, 200);
    let events: Vec<&str> =
        history.body.as_array().expect("array").iter().map(|e| e["event"].as_str().expect("event")).collect();
    assert_eq!(events, ["ADD", "UPDATE"]);
    assert_eq!(history.body[1]["old_memory"], "I am allergic to peanuts");
    assert_eq!(history.body[1]["new_memory"], "I am severely allergic to peanuts and tree nuts");

    // The new text is what search now finds.
    let nuts = server.search_texts(json!({"query": "tree nut allergy", "user_id": "alice", "top_k": 1})).await;
    assert_eq!(nuts, ["I am severely allergic to peanuts and tree nuts"]);

    let deleted = server.delete(&format!("/memories/{id}")).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    server.get(&format!("/memories/{id}")).await.assert_error(404, "memory_not_found");
    server.delete(&format!("/memories/{id}")).await.assert_error(404, "memory_not_found");
    let history = server.get(&format!("/memories/{id}/history")).await;
    let events: Vec<&str> =
        history.body.as_array().expect("array").iter().map(|e| e["event"].as_str().expect("event")).collect();
    assert_eq!(events, ["ADD", "UPDATE", "DELETE"], "history outlives the memory");
    assert_eq!(history.body[2]["is_deleted"], true);
}

#[tokio::test]
async fn add_rejects_bad_input_naming_the_field() {
    let server = TestServer::start().await;
    let message = json!([{"role": "user", "content": "hello"}]);
    let cases = [
        (json!({"messages": message, "infer": false}), "user_id"),
        (json!({"messages": message, "user_id": "", "infer": false}), "user_id"),
        (json!({"messages": message, "user_id": "   ", "infer": false}), "user_id"),
        (json!({"messages": message, "user_id": "al ice", "infer": false}), "user_id"),
        (json!({"messages": message, "user_id": "*", "infer": false}), "user_id"),
        (json!({"messages": message, "agent_id": "a*", "infer": false}), "agent_id"),
        (json!({"messages": message, "run_id": "r?", "infer": false}), "run_id"),
        (json!({"messages": [], "user_id": "u", "infer": false}), "messages"),
        (json!({"messages": [{"role": "robot", "content": "x"}], "user_id": "u", "infer": false}), "messages[0].role"),
        (
            json!({"messages": message, "user_id": "u", "infer": false, "expiration_date": "tomorrow"}),
            "expiration_date",
        ),
        (json!({"messages": message, "user_id": "u", "infer": false, "timestamp": "last week"}), "timestamp"),
        (json!({"messages": message, "user_id": "u", "infer": false, "memory_type": "episodic"}), "memory_type"),
        (
            json!({"messages": message, "user_id": "u", "infer": false, "metadata": {"k": "x".repeat(17 * 1024)}}),
            "metadata",
        ),
    ];
    for (body, field) in cases {
        let reply = server.post("/memories", body.clone()).await;
        let message = reply.assert_error(400, "validation_failed");
        assert_eq!(reply.body["details"]["field"], field, "{body}: {message}");
        assert!(message.contains(field), "message names the field: {message}");
    }
    let too_many: Vec<_> = (0..101).map(|i| json!({"role": "user", "content": format!("m{i}")})).collect();
    let reply = server.post("/memories", json!({"messages": too_many, "user_id": "u", "infer": false})).await;
    reply.assert_error(400, "validation_failed");

    // Wrong shapes are validation errors naming the field, like wrong values.
    for (body, field) in [
        (json!({"user_id": "u"}), "messages"),
        (json!({"messages": "hi", "user_id": "u"}), "messages"),
        (json!({"messages": [{"content": "x"}], "user_id": "u"}), "messages[0].role"),
        (json!({"messages": message, "user_id": 7}), "user_id"),
        (json!({"messages": message, "user_id": "u", "run_id": {"id": 1}}), "run_id"),
        (json!({"messages": message, "user_id": "u", "infer": "no"}), "infer"),
    ] {
        let reply = server.post("/memories", body.clone()).await;
        let message = reply.assert_error(400, "validation_failed");
        assert_eq!(reply.body["details"]["field"], field, "{body}: {message}");
    }

    // Nothing was stored by any of the rejected calls.
    assert!(server.list_texts("user_id=u").await.is_empty());
}

#[tokio::test]
async fn infer_without_llm_is_a_clear_error() {
    let server = TestServer::start().await;
    let reply = server
        .post("/memories", json!({"messages": [{"role": "user", "content": "I like tea"}], "user_id": "u"}))
        .await;
    let message = reply.assert_error(400, "llm_not_configured");
    assert!(message.contains("infer=false"), "{message}");
    assert!(server.list_texts("user_id=u").await.is_empty());
}

#[tokio::test]
async fn malformed_bodies_and_routes_use_the_error_envelope() {
    let server = TestServer::start().await;
    let raw = server
        .client
        .post(format!("{}/memories", server.base))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("send");
    let reply = mem0_http_tests::Reply::read_public(raw).await;
    reply.assert_error(400, "invalid_json");

    let raw = server.client.post(format!("{}/search", server.base)).body("query=x").send().await.expect("send");
    mem0_http_tests::Reply::read_public(raw).await.assert_error(415, "unsupported_media_type");

    server.get("/nope").await.assert_error(404, "route_not_found");
    server.call(Method::PATCH, "/memories", None).await.assert_error(405, "method_not_allowed");
    server.get("/memories/not-a-uuid").await.assert_error(400, "invalid_memory_id");
    server.put("/memories/123", json!({"text": "x"})).await.assert_error(400, "invalid_memory_id");
    server.delete("/memories/123").await.assert_error(400, "invalid_memory_id");
    server.get("/memories/123/history").await.assert_error(400, "invalid_memory_id");
    let missing = uuid::Uuid::new_v4();
    server.get(&format!("/memories/{missing}")).await.assert_error(404, "memory_not_found");
    server.put(&format!("/memories/{missing}"), json!({"text": "x"})).await.assert_error(404, "memory_not_found");
    server.get(&format!("/memories/{missing}/history")).await.assert_error(404, "memory_not_found");
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let mut settings = mem0_http_tests::test_settings();
    settings.server.body_limit_bytes = 4096;
    let server = TestServer::start_with(settings, mem0_http_tests::local_embedder().await).await;
    let big = "x".repeat(8192);
    let reply = server
        .post("/memories", json!({"messages": [{"role": "user", "content": big}], "user_id": "u", "infer": false}))
        .await;
    reply.assert_error(413, "payload_too_large");
    assert!(server.list_texts("user_id=u").await.is_empty());
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let server = TestServer::start().await;
    for path in ["/health", "/ready", "/memories?user_id=u", "/nope", "/openapi.json"] {
        let reply = server.get(path).await;
        let id = reply.headers.get("x-request-id").expect("x-request-id header");
        assert!(!id.is_empty(), "{path}");
    }
    // A sane incoming id is kept, an unsafe one replaced.
    let raw = server
        .client
        .get(format!("{}/health", server.base))
        .header("x-request-id", "trace-42")
        .send()
        .await
        .expect("send");
    assert_eq!(raw.headers()["x-request-id"], "trace-42");
    let raw = server
        .client
        .get(format!("{}/health", server.base))
        .header("x-request-id", "x".repeat(200))
        .send()
        .await
        .expect("send");
    assert_ne!(raw.headers()["x-request-id"].len(), 200);
}

#[tokio::test]
async fn update_validates_and_merges() {
    let server = TestServer::start().await;
    let id = server.add_texts("u", &["likes green tea"], json!({"a": 1})).await.remove(0);
    let path = format!("/memories/{id}");
    let reply = server.put(&path, json!({})).await;
    reply.assert_error(400, "validation_failed");
    server.put(&path, json!({"text": "   "})).await.assert_error(400, "validation_failed");
    server.put(&path, json!({"expiration_date": "31/12/2030"})).await.assert_error(400, "validation_failed");

    let reply = server.put(&path, json!({"metadata": {"b": true, "user_id": "mallory"}})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["result"]["metadata"], json!({"a": 1, "b": true}), "scope keys cannot be changed");
    assert_eq!(reply.body["result"]["user_id"], "u");
    assert_eq!(reply.body["result"]["memory"], "likes green tea", "text unchanged");

    let reply = server.put(&path, json!({"expiration_date": "2030-01-31"})).await;
    assert_eq!(reply.body["result"]["expiration_date"], "2030-01-31");
    let reply = server.put(&path, json!({"expiration_date": null})).await;
    assert!(reply.body["result"].get("expiration_date").is_none(), "null clears it: {}", reply.body);
}

#[tokio::test]
async fn expired_memories_are_hidden_unless_asked_for() {
    let server = TestServer::start().await;
    let reply = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "my passport expired"}], "user_id": "u", "infer": false, "expiration_date": "2020-01-01"}),
        )
        .await;
    let expired_id = reply.body["results"][0]["id"].as_str().expect("id").to_owned();
    let reply = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "my passport is valid"}], "user_id": "u", "infer": false, "expiration_date": "2999-01-01"}),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(server.list_texts("user_id=u").await, ["my passport is valid"]);
    assert_eq!(server.list_texts("user_id=u&show_expired=true").await.len(), 2);
    let hits = server.search_texts(json!({"query": "passport", "user_id": "u"})).await;
    assert_eq!(hits, ["my passport is valid"]);
    let hits = server.search_texts(json!({"query": "passport", "user_id": "u", "show_expired": true})).await;
    assert_eq!(hits.len(), 2);
    // get by id still returns it.
    let got = server.get(&format!("/memories/{expired_id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["expiration_date"], "2020-01-01");
}

#[tokio::test]
async fn delete_all_deletes_exactly_the_scope() {
    let server = TestServer::start().await;
    let reply = server
        .post("/memories", json!({"messages": [{"role": "user", "content": "alice in run 1"}], "user_id": "alice", "run_id": "r1", "infer": false}))
        .await;
    let in_run = reply.body["results"][0]["id"].as_str().expect("id").to_owned();
    server
        .post("/memories", json!({"messages": [{"role": "user", "content": "alice in run 2"}], "user_id": "alice", "run_id": "r2", "infer": false}))
        .await;
    server.add_texts("bob", &["bob's memory"], json!({})).await;

    server.delete("/memories").await.assert_error(400, "validation_failed");
    server.delete("/memories?user_id=*").await.assert_error(400, "validation_failed");
    let reply = server.delete("/memories?user_id=alice&run_id=r1").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["deleted"], 1);
    assert_eq!(server.list_texts("user_id=alice").await, ["alice in run 2"]);
    assert_eq!(server.list_texts("user_id=bob").await, ["bob's memory"]);
    let history = server.get(&format!("/memories/{in_run}/history")).await;
    assert_eq!(history.body.as_array().map(Vec::len), Some(2), "ADD and DELETE: {}", history.body);

    let reply = server.delete("/memories?user_id=alice").await;
    assert_eq!(reply.body["deleted"], 1);
    assert!(server.list_texts("user_id=alice").await.is_empty());
    assert_eq!(server.list_texts("user_id=bob").await.len(), 1);
}

#[tokio::test]
async fn reset_wipes_the_tenant() {
    let server = TestServer::start().await;
    let id = server.add_texts("u", &["one", "two"], json!({})).await.remove(0);
    let reply = server.post("/reset", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(server.list_texts("user_id=u").await.is_empty());
    server.get(&format!("/memories/{id}/history")).await.assert_error(404, "memory_not_found");
    // The service keeps working after a reset.
    server.add_texts("u", &["three"], json!({})).await;
    assert_eq!(server.list_texts("user_id=u").await, ["three"]);
}

#[tokio::test]
async fn multimodal_content_parts_and_null_content() {
    let server = TestServer::start().await;
    let reply = server
        .post(
            "/memories",
            json!({
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "I moved to"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "Lisbon"}]},
                    {"role": "user", "content": null}
                ],
                "user_id": "u",
                "infer": false
            }),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(texts(&reply.body["results"]), ["I moved to Lisbon"]);
}

#[tokio::test]
async fn backfilled_timestamp_becomes_created_at() {
    let server = TestServer::start().await;
    let reply = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "graduated"}], "user_id": "u", "infer": false, "timestamp": "2023-05-01T10:00:00Z"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let id = reply.body["results"][0]["id"].as_str().expect("id");
    let got = server.get(&format!("/memories/{id}")).await;
    assert_eq!(got.body["created_at"], "2023-05-01T10:00:00Z");
    let reply = server
        .post("/memories", json!({"messages": [{"role": "user", "content": "x"}], "user_id": "u", "infer": false, "timestamp": 1_700_000_000}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn health_and_ready() {
    let server = TestServer::start().await;
    let reply = server.get("/health").await;
    assert_eq!((reply.status, reply.body["status"].as_str()), (200, Some("ok")));
    let reply = server.get("/ready").await;
    assert_eq!((reply.status, reply.body["status"].as_str()), (200, Some("ready")));
}

/// U+0000 is refused with 400 naming the field on both stores (Postgres cannot store it, and the
/// stores must behave the same); nothing is written.
#[tokio::test]
async fn nul_characters_are_refused_on_both_stores() {
    for kind in mem0_http_tests::StoreKind::ALL {
        let server =
            TestServer::start_on(kind, mem0_http_tests::test_settings(), mem0_http_tests::local_embedder().await).await;
        let id = server.add_texts("u", &["a clean memory"], json!({})).await.remove(0);
        let add = |message: serde_json::Value, extra: serde_json::Value| {
            let mut body = json!({"messages": [message], "user_id": "u", "infer": false});
            for (key, value) in extra.as_object().expect("object") {
                body[key] = value.clone();
            }
            body
        };
        let nul = "before\u{0}after";
        let adds = [
            (add(json!({"role": "user", "content": nul}), json!({})), "messages[0].content"),
            (
                add(json!({"role": "user", "content": [{"type": "text", "text": nul}]}), json!({})),
                "messages[0].content",
            ),
            (add(json!({"role": "user", "content": "x", "name": nul}), json!({})), "messages[0].name"),
            (add(json!({"role": "user", "content": "x"}), json!({"metadata": {nul: 1}})), "metadata"),
            (add(json!({"role": "user", "content": "x"}), json!({"metadata": {"k": nul}})), "metadata"),
            (add(json!({"role": "user", "content": "x"}), json!({"metadata": {"k": [{"deep": nul}]}})), "metadata"),
        ];
        for (body, field) in adds {
            let reply = server.post("/memories", body.clone()).await;
            reply.assert_error(400, "validation_failed");
            assert_eq!(reply.body["details"]["field"], field, "{kind:?} {body}");
        }
        for (body, field) in [(json!({"text": nul}), "text"), (json!({"metadata": {"k": nul}}), "metadata")] {
            let reply = server.put(&format!("/memories/{id}"), body.clone()).await;
            reply.assert_error(400, "validation_failed");
            assert_eq!(reply.body["details"]["field"], field, "{kind:?} {body}");
        }
        for (body, field) in [
            (json!({"query": nul, "user_id": "u"}), "query"),
            (json!({"query": "x", "filters": {"user_id": "u", "k": nul}}), "filters"),
            (json!({"query": "x", "filters": {"user_id": "u", "k": {"in": ["a", nul]}}}), "filters"),
        ] {
            let reply = server.post("/search", body.clone()).await;
            reply.assert_error(400, "validation_failed");
            assert_eq!(reply.body["details"]["field"], field, "{kind:?} {body}");
        }
        let reply = server.get("/memories?user_id=u&filters=%7B%22k%22%3A%22a%5Cu0000b%22%7D").await;
        reply.assert_error(400, "validation_failed");
        assert_eq!(reply.body["details"]["field"], "filters");
        let reply = server.post("/api-keys", json!({"label": nul, "role": "read"})).await;
        reply.assert_error(400, "validation_failed");
        // A forged listing cursor carrying U+0000 ("user:\u{0}" in base64url).
        let reply = server.get("/entities?cursor=dXNlcjoA").await;
        reply.assert_error(400, "validation_failed");
        assert_eq!(reply.body["details"]["field"], "cursor", "{kind:?}");
        assert_eq!(server.list_texts("user_id=u").await, ["a clean memory"], "{kind:?}: nothing was written");
        assert_eq!(server.get(&format!("/memories/{id}")).await.body["memory"], "a clean memory");
    }
}
