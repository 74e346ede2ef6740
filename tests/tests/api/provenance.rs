//! Provenance: every memory says what kind of source said it, who, through which credential, on
//! what evidence and how sure; callers set what is theirs, the credential is never taken from
//! the body; the fields filter searches and listings; a person's review is an update; extracted
//! facts carry the model's confidence and their buffered messages as evidence. The credential of
//! an API key: `security::audit_trail_names_the_credential_and_stays_in_its_tenant`.

use mem0_http_tests::{chat_completion, local_embedder, settings_with_fake_llm, TestServer};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

fn by_text<'a>(results: &'a Value, text: &str) -> &'a Value {
    results.as_array().expect("results").iter().find(|item| item["memory"] == text).expect("memory present")
}

#[tokio::test]
async fn memories_carry_provenance_from_role_caller_and_credential() {
    let server = TestServer::start().await;
    let said = server
        .post(
            "/memories",
            json!({"messages": [
                {"role": "user", "content": "I moved to Lyon in March"},
                {"role": "assistant", "content": "Lyon has great food markets", "name": "helper"}
            ], "user_id": "ann", "infer": false}),
        )
        .await;
    assert_eq!(said.status, 200, "{}", said.body);
    let tool = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "Forecast for Lyon: rain on Friday"}],
                "user_id": "ann", "infer": false, "source_type": "tool_result", "source_actor": "weather-api",
                "evidence_ref": "call:42", "confidence": 0.95,
                // Not the caller's to set: ignored.
                "source_app": "forged-app"}),
        )
        .await;
    assert_eq!(tool.status, 200, "{}", tool.body);

    let listed = server.get("/memories?user_id=ann").await;
    let results = &listed.body["results"];
    let user = by_text(results, "I moved to Lyon in March");
    assert_eq!(
        (&user["source_type"], &user["confidence"], &user["source_app"]),
        (&json!("user_stated"), &json!(0.9), &json!("local")),
        "{user}"
    );
    assert!(user.get("source_actor").is_none() && user.get("evidence_ref").is_none(), "{user}");
    let assistant = by_text(results, "Lyon has great food markets");
    assert_eq!(
        (&assistant["source_type"], &assistant["confidence"], &assistant["source_actor"]),
        (&json!("assistant_stated"), &json!(0.7), &json!("helper")),
        "{assistant}"
    );
    let forecast = by_text(results, "Forecast for Lyon: rain on Friday");
    assert_eq!(forecast["source_type"], "tool_result", "{forecast}");
    assert_eq!(forecast["source_actor"], "weather-api");
    assert_eq!(forecast["evidence_ref"], "call:42");
    assert_eq!(forecast["confidence"], 0.95);
    assert_eq!(forecast["source_app"], "local", "the credential, not the body: {forecast}");
    let id = forecast["id"].as_str().expect("id");
    let got = server.get(&format!("/memories/{id}")).await;
    assert_eq!(got.body["evidence_ref"], "call:42", "{}", got.body);

    // Filters on search and listing.
    let search = |filters: Value| {
        let server = &server;
        async move {
            let mut texts = server
                .search_texts(json!({"query": "Lyon", "filters": filters, "user_id": "ann", "threshold": 0.0}))
                .await;
            texts.sort();
            texts
        }
    };
    assert_eq!(search(json!({"source_type": "tool_result"})).await, ["Forecast for Lyon: rain on Friday"]);
    assert_eq!(
        search(json!({"confidence": {"gte": 0.9}})).await,
        ["Forecast for Lyon: rain on Friday", "I moved to Lyon in March"]
    );
    assert_eq!(search(json!({"source_actor": "helper"})).await, ["Lyon has great food markets"]);
    let filter = serde_json::to_string(&json!({"source_type": {"ne": "user_stated"}})).expect("json");
    let mut listed = server.list_texts(&format!("user_id=ann&filters={}", urlencode(&filter))).await;
    listed.sort();
    assert_eq!(listed, ["Forecast for Lyon: rain on Friday", "Lyon has great food markets"]);

    // A person's review: the type changes, the confidence follows it unless given.
    let reviewed = server.put(&format!("/memories/{id}"), json!({"source_type": "human_reviewed"})).await;
    assert_eq!(reviewed.status, 200, "{}", reviewed.body);
    let result = &reviewed.body["result"];
    assert_eq!((&result["source_type"], &result["confidence"]), (&json!("human_reviewed"), &json!(1.0)), "{result}");
    assert_eq!(result["memory"], "Forecast for Lyon: rain on Friday", "only provenance changed");
    let lowered = server.put(&format!("/memories/{id}"), json!({"confidence": 0.4})).await;
    assert_eq!(lowered.body["result"]["confidence"], 0.4, "{}", lowered.body);
    assert_eq!(lowered.body["result"]["source_type"], "human_reviewed");

    // Bad provenance is a 400 naming the field, and nothing is stored.
    for (extra, field) in [
        (json!({"confidence": 1.5}), "confidence"),
        (json!({"confidence": -0.1}), "confidence"),
        (json!({"confidence": "high"}), "confidence"),
        (json!({"source_type": "rumour"}), "source_type"),
        (json!({"evidence_ref": "x".repeat(300)}), "evidence_ref"),
        (json!({"source_actor": "   "}), "source_actor"),
    ] {
        let mut body =
            json!({"messages": [{"role": "user", "content": "Ann likes rain"}], "user_id": "ann", "infer": false});
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        let reply = server.post("/memories", body).await;
        assert_eq!(reply.status, 400, "{extra}: {}", reply.body);
        assert_eq!(reply.body["details"]["field"], field, "{extra}: {}", reply.body);
    }
    assert!(!server.list_texts("user_id=ann").await.contains(&"Ann likes rain".to_owned()));
    let reply = server.put(&format!("/memories/{id}"), json!({"confidence": 2})).await;
    assert_eq!((reply.status, &reply.body["details"]["field"]), (400, &json!("confidence")), "{}", reply.body);
}

#[tokio::test]
async fn extracted_facts_carry_the_models_confidence_and_their_messages() {
    let llm = MockServer::start().await;
    let facts = json!({"facts": [
        {"text": "User moved to Lyon in March 2026", "attributed_to": "user", "entities": ["Lyon"], "confidence": 0.6},
        {"text": "User works as a baker", "attributed_to": "user", "entities": []}
    ]})
    .to_string();
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(chat_completion(&facts))
        .mount(&llm)
        .await;
    let settings = settings_with_fake_llm(&llm.uri());
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let reply = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "I think I moved to Lyon in March; I bake bread for a living"}],
                "user_id": "ann"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let listed = server.get("/memories?user_id=ann").await;
    let results = &listed.body["results"];
    let moved = by_text(results, "User moved to Lyon in March 2026");
    let baker = by_text(results, "User works as a baker");
    assert_eq!((&moved["source_type"], &moved["confidence"]), (&json!("agent_inferred"), &json!(0.6)), "{moved}");
    assert_eq!(baker["confidence"], 0.7, "the source type's default when the model gives none: {baker}");
    let evidence = moved["evidence_ref"].as_str().expect("evidence");
    assert!(evidence.starts_with("messages:"), "{evidence}");
    assert_eq!(baker["evidence_ref"], evidence, "both facts come from the same messages");
    assert_eq!(moved["source_app"], "local");
    // The prompt asked for it.
    let requests = llm.received_requests().await.expect("recorded");
    let prompt = String::from_utf8_lossy(&requests[0].body).to_string();
    assert!(prompt.contains("confidence"), "the extraction prompt asks for a confidence");
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}
