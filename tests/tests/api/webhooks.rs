//! Webhooks: a local receiver sees every event once, signed with the secret it was shown at
//! creation; a 500 is retried; a receiver that never answers 2xx gets its webhook disabled until
//! an admin enables it; the URL guard refuses link-local and metadata targets.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use mem0_http_tests::{settings_with_fake_llm, test_settings, TestServer};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Answers 500 to the first attempt of each delivery and 204 afterwards.
struct FailFirst(Mutex<HashSet<String>>);

impl Respond for FailFirst {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let delivery = header(request, "mem0-delivery");
        if self.0.lock().expect("lock").insert(delivery) {
            ResponseTemplate::new(500)
        } else {
            ResponseTemplate::new(204)
        }
    }
}

fn header(request: &Request, name: &str) -> String {
    request.headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned()
}

/// Checks `Mem0-Signature: t=…,v1=…` the way a receiver would: HMAC-SHA256 of "<t>.<body>".
fn verify(request: &Request, secret: &str) -> bool {
    let signature = header(request, "mem0-signature");
    let Some((t, v1)) = signature.split_once(',') else { return false };
    let (Some(t), Some(v1)) = (t.strip_prefix("t="), v1.strip_prefix("v1=")) else { return false };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(&request.body);
    let expected: String = mac.finalize().into_bytes().iter().map(|byte| format!("{byte:02x}")).collect();
    let fresh = t.parse::<i64>().is_ok_and(|t| (chrono::Utc::now().timestamp() - t).abs() < 300);
    expected == v1 && fresh
}

/// Polls the delivery log of `webhook` until `done` holds for it (at most 30 s).
async fn deliveries_until(server: &TestServer, webhook: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = server.get(&format!("/webhooks/{webhook}/deliveries?limit=500")).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let results = reply.body["results"].as_array().cloned().unwrap_or_default();
        if done(&results) {
            return results;
        }
        assert!(Instant::now() < deadline, "deliveries not done after 30 s: {results:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_receiver_sees_every_event_once_signed_and_retried_after_a_500() {
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/hook"))
        .respond_with(FailFirst(Mutex::new(HashSet::new())))
        .mount(&receiver)
        .await;
    // The model refuses every request: a queued add that needs it fails (job.failed).
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad model"}})))
        .mount(&llm)
        .await;
    let mut settings = settings_with_fake_llm(&llm.uri());
    settings.webhooks.retry_delays_secs = vec![1, 1];
    let server = TestServer::start_with(settings, mem0_http_tests::local_embedder().await).await;

    let created =
        server.post("/webhooks", json!({"url": format!("{}/hook", receiver.uri()), "description": "ci"})).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let secret = created.body["secret"].as_str().expect("secret").to_owned();
    let webhook = created.body["id"].as_str().expect("id").to_owned();
    assert_eq!(created.body["events"].as_array().map(Vec::len), Some(5), "all events by default: {}", created.body);

    // A long assistant turn, changed, deleted; a queued add that succeeds; one that fails.
    let long_reply = "The ferry to Vis leaves Split at 07:30 and the crossing takes two hours. ".repeat(25);
    let ids = server.add_texts("ivo", &[long_reply.trim()], json!({})).await;
    let memory = &ids[0];
    assert_eq!(
        server.put(&format!("/memories/{memory}"), json!({"text": "Ivo takes the 07:30 ferry"})).await.status,
        200
    );
    assert_eq!(server.delete(&format!("/memories/{memory}")).await.status, 200);
    let queued = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "Ivo sails"}], "user_id": "ivo", "infer": false, "async_mode": true}),
        )
        .await;
    assert_eq!(queued.status, 202, "{}", queued.body);
    let doomed = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "Ivo fishes"}], "user_id": "ivo", "async_mode": true}),
        )
        .await;
    assert_eq!(doomed.status, 202, "{}", doomed.body);

    // added ×2, updated, deleted, job.succeeded, job.failed: each delivered on its second try.
    let log = deliveries_until(&server, &webhook, |log| {
        log.len() == 6 && log.iter().all(|delivery| delivery["status"] == "succeeded")
    })
    .await;
    assert!(log.iter().all(|delivery| delivery["attempts"] == 2 && delivery["response_status"] == 204), "{log:#?}");

    let requests = receiver.received_requests().await.expect("recorded");
    assert_eq!(requests.len(), 12, "one 500 and one 204 per event");
    assert!(requests.iter().all(|request| verify(request, &secret)), "every request is signed with the secret");
    assert!(!requests.iter().any(|request| verify(request, "whsec_other")), "and only with it");
    let mut bodies: HashMap<String, Value> = HashMap::new();
    for request in &requests {
        let body: Value = serde_json::from_slice(&request.body).expect("JSON body");
        assert_eq!(header(request, "mem0-event"), body["type"].as_str().expect("type"));
        assert_eq!(header(request, "mem0-webhook"), webhook);
        assert_eq!(body["tenant"], json!(test_settings().server.default_tenant), "{body}");
        bodies.insert(body["id"].as_str().expect("event id").to_owned(), body);
    }
    let mut kinds: Vec<&str> = bodies.values().map(|body| body["type"].as_str().expect("type")).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        ["job.failed", "job.succeeded", "memory.added", "memory.added", "memory.deleted", "memory.updated"],
        "each event once"
    );
    let of = |kind: &str| bodies.values().filter(|body| body["type"] == kind).cloned().collect::<Vec<_>>();
    let added = of("memory.added");
    let first = added.iter().find(|body| body["data"]["memory_id"] == json!(memory)).expect("the first add");
    assert_eq!(first["data"]["memory"], long_reply.trim(), "the whole memory, not a cut");
    assert_eq!(first["data"]["user_id"], "ivo");
    let updated = &of("memory.updated")[0]["data"];
    assert_eq!(
        (&updated["old_memory"], &updated["memory"]),
        (&json!(long_reply.trim()), &json!("Ivo takes the 07:30 ferry"))
    );
    assert_eq!(of("memory.deleted")[0]["data"]["memory_id"], json!(memory));
    let succeeded = &of("job.succeeded")[0]["data"];
    assert_eq!(succeeded["job_id"], queued.body["job_id"]);
    assert_eq!(succeeded["result"]["results"][0]["memory"], "Ivo sails", "{succeeded}");
    let failed = &of("job.failed")[0]["data"];
    assert_eq!(failed["job_id"], doomed.body["job_id"]);
    assert_eq!(failed["error"]["code"], "provider_bad_request", "{failed}");

    let listed = server.get(&format!("/webhooks/{webhook}")).await;
    assert_eq!(listed.body["consecutive_failures"], 0, "{}", listed.body);
    assert!(listed.body["last_success_at"].is_string(), "{}", listed.body);
}

/// A receiver that always fails: retried per `retry_delays_secs`, then given up, and its webhook
/// disabled (sent nothing new) until an admin enables it again.
#[tokio::test]
async fn a_dead_receiver_gets_its_webhook_disabled_until_enabled_again() {
    let receiver = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(503)).mount(&receiver).await;
    let mut settings = test_settings();
    settings.webhooks.retry_delays_secs = vec![1];
    let server = TestServer::start_with(settings, mem0_http_tests::local_embedder().await).await;
    let created =
        server.post("/webhooks", json!({"url": format!("{}/dead", receiver.uri()), "events": ["memory.added"]})).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let webhook = created.body["id"].as_str().expect("id").to_owned();
    server.add_texts("ana", &["Ana keeps bees"], json!({})).await;
    let log = deliveries_until(&server, &webhook, |log| log.first().is_some_and(|d| d["status"] == "failed")).await;
    assert_eq!((&log[0]["attempts"], &log[0]["response_status"]), (&json!(2), &json!(503)), "{log:#?}");
    let disabled = server.get(&format!("/webhooks/{webhook}")).await.body;
    assert_eq!(disabled["enabled"], false, "{disabled}");
    assert!(disabled["disabled_reason"].as_str().is_some_and(|reason| reason.contains("failed")), "{disabled}");

    // A disabled webhook is sent nothing new; once enabled again, it is.
    server.add_texts("ana", &["Ana sells honey"], json!({})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(deliveries_until(&server, &webhook, |log| !log.is_empty()).await.len(), 1);
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200)).with_priority(1).mount(&receiver).await;
    let enabled =
        server.call(reqwest::Method::PATCH, &format!("/webhooks/{webhook}"), Some(json!({"enabled": true}))).await;
    assert_eq!((enabled.status, &enabled.body["enabled"]), (200, &json!(true)), "{}", enabled.body);
    assert_eq!(enabled.body["disabled_reason"], Value::Null);
    server.add_texts("ana", &["Ana bought a second hive"], json!({})).await;
    let log = deliveries_until(&server, &webhook, |log| log.len() == 2 && log[0]["status"] == "succeeded").await;
    assert_eq!((&log[0]["attempts"], &log[1]["status"]), (&json!(1), &json!("failed")), "{log:#?}");

    // Deleting removes it with its log.
    assert_eq!(server.delete(&format!("/webhooks/{webhook}")).await.status, 200);
    server.get(&format!("/webhooks/{webhook}")).await.assert_error(404, "webhook_not_found");
}

#[tokio::test]
async fn the_url_guard_and_the_inputs_are_checked() {
    let server = TestServer::start().await;
    for url in [
        "http://169.254.169.254/latest/meta-data",
        "http://[fe80::1]/hook",
        "http://metadata.google.internal/hook",
        "http://[::ffff:169.254.169.254]/hook",
        "ftp://example.com/hook",
        "not a url",
        "",
    ] {
        server.post("/webhooks", json!({"url": url})).await.assert_error(400, "validation_failed");
    }
    server
        .post("/webhooks", json!({"url": "http://127.0.0.1:9/hook", "events": []}))
        .await
        .assert_error(400, "validation_failed");
    let unknown =
        server.post("/webhooks", json!({"url": "http://127.0.0.1:9/hook", "events": ["memory.created"]})).await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    let chosen = server.post("/webhooks", json!({"url": "http://127.0.0.1:9/hook", "secret": "mine"})).await;
    assert_eq!(chosen.status, 400, "unknown fields are refused: {}", chosen.body);
    server.get("/webhooks/not-a-uuid").await.assert_error(400, "validation_failed");
    server.get(&format!("/webhooks/{}", uuid::Uuid::now_v7())).await.assert_error(404, "webhook_not_found");
    // The response holds a secret shown once: not replayable.
    let replay = server
        .client
        .post(format!("{}/webhooks", server.base))
        .header("idempotency-key", "k1")
        .json(&json!({"url": "http://127.0.0.1:9/hook"}))
        .send()
        .await
        .expect("request");
    assert_eq!(replay.status(), 400);
    assert!(server.get("/webhooks").await.body["results"].as_array().is_some_and(Vec::is_empty));
}
