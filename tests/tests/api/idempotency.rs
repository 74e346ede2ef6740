//! `Idempotency-Key` on writes: a retry gets the first response and changes nothing (no second
//! memory, no second LLM call); another request under the same key is 422; a retry while the
//! first still runs is 409, then the replay; a failure that changed nothing releases the key; a
//! client hanging up does not leave the key claimed.

use std::time::Duration;

use mem0_http_tests::{chat_completion, local_embedder, settings_with_fake_llm, Reply, TestServer};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn chat_reply(fact: &str) -> ResponseTemplate {
    chat_completion(&json!({"facts": [{"text": fact}]}).to_string())
}

async fn start_with_llm(llm: &MockServer) -> TestServer {
    let settings = settings_with_fake_llm(&llm.uri());
    TestServer::start_with(settings, local_embedder().await).await
}

async fn send(server: &TestServer, method: reqwest::Method, path: &str, key: &str, body: Option<Value>) -> Reply {
    let mut request = server.client.request(method, format!("{}{path}", server.base)).header("Idempotency-Key", key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    Reply::read_public(request.send().await.expect("send")).await
}

fn conversation(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}], "user_id": "ida"})
}

async fn chat_calls(llm: &MockServer) -> usize {
    llm.received_requests().await.unwrap_or_default().len()
}

#[tokio::test]
async fn a_retried_add_is_replayed_not_repeated() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(chat_reply("Ida rows on Sundays"))
        .mount(&llm)
        .await;
    let server = start_with_llm(&llm).await;
    let first =
        send(&server, reqwest::Method::POST, "/memories", "add-1", Some(conversation("I row on Sundays"))).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(first.headers.get("idempotent-replayed").is_none());
    let again =
        send(&server, reqwest::Method::POST, "/memories", "add-1", Some(conversation("I row on Sundays"))).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body, "the same response, the same memory ids");
    assert_eq!(again.headers.get("idempotent-replayed").and_then(|value| value.to_str().ok()), Some("true"));
    assert_eq!(chat_calls(&llm).await, 1, "one LLM call");
    assert_eq!(server.list_texts("user_id=ida").await, ["Ida rows on Sundays"], "one memory");

    // The same key for another request: refused, nothing runs.
    let other = send(&server, reqwest::Method::POST, "/memories", "add-1", Some(conversation("I swim too"))).await;
    other.assert_error(422, "idempotency_key_reused");
    assert_eq!(chat_calls(&llm).await, 1);
    // Keys are per request, not global: a new key runs.
    let fresh = send(&server, reqwest::Method::POST, "/memories", "add-2", Some(conversation("I swim too"))).await;
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert_eq!(chat_calls(&llm).await, 2);
}

#[tokio::test]
async fn a_retry_while_the_first_runs_is_409_then_replayed() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(chat_reply("Ida keeps a kayak in Bergen").set_delay(Duration::from_millis(1500)))
        .mount(&llm)
        .await;
    let server = start_with_llm(&llm).await;
    let body = conversation("My kayak is in Bergen");
    let first = send(&server, reqwest::Method::POST, "/memories", "slow", Some(body.clone()));
    let second = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        send(&server, reqwest::Method::POST, "/memories", "slow", Some(body.clone())).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.status, 200, "{}", first.body);
    second.assert_error(409, "idempotency_key_in_progress");
    let third = send(&server, reqwest::Method::POST, "/memories", "slow", Some(body)).await;
    assert_eq!((third.status, &third.body), (200, &first.body));
    assert_eq!(chat_calls(&llm).await, 1);
}

/// A client that hangs up mid-request: the add still finishes, its response is kept, and the
/// retry gets it.
#[tokio::test]
async fn a_client_that_hangs_up_gets_the_outcome_on_retry() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(chat_reply("Ida plays the cello").set_delay(Duration::from_millis(800)))
        .mount(&llm)
        .await;
    let server = start_with_llm(&llm).await;
    let body = conversation("I play the cello");
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(200)).build().expect("client");
    let cut = impatient
        .post(format!("{}/memories", server.base))
        .header("Idempotency-Key", "hung-up")
        .json(&body)
        .send()
        .await;
    assert!(cut.is_err(), "the client gave up");
    let mut retried = None;
    for _ in 0..50 {
        let reply = send(&server, reqwest::Method::POST, "/memories", "hung-up", Some(body.clone())).await;
        if reply.status != 409 {
            retried = Some(reply);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let retried = retried.expect("the first request finished");
    assert_eq!(retried.status, 200, "{}", retried.body);
    assert_eq!(retried.headers.get("idempotent-replayed").and_then(|value| value.to_str().ok()), Some("true"));
    assert_eq!(retried.body["results"][0]["memory"], "Ida plays the cello");
    assert_eq!(server.list_texts("user_id=ida").await.len(), 1);
    assert_eq!(chat_calls(&llm).await, 1);
}

/// A first attempt that failed without changing anything (the provider refused) releases the
/// key: the retry runs.
#[tokio::test]
async fn a_failed_attempt_releases_its_key() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"error": {"message": "bad key"}})))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(chat_reply("Ida bakes bread"))
        .mount(&llm)
        .await;
    let server = start_with_llm(&llm).await;
    let body = conversation("I bake bread");
    let failed = send(&server, reqwest::Method::POST, "/memories", "retry-me", Some(body.clone())).await;
    assert_eq!(failed.status, 502, "{}", failed.body);
    let retried = send(&server, reqwest::Method::POST, "/memories", "retry-me", Some(body)).await;
    assert_eq!(retried.status, 200, "{}", retried.body);
    assert!(retried.headers.get("idempotent-replayed").is_none(), "it ran");
    assert_eq!(server.list_texts("user_id=ida").await, ["Ida bakes bread"]);
}

#[tokio::test]
async fn deletes_and_updates_replay_and_bad_keys_are_refused() {
    let server = TestServer::start().await;
    let id = server.add_texts("ida", &["Ida likes figs"], json!({})).await.remove(0);
    let update = json!({"text": "Ida likes fresh figs"});
    let put = send(&server, reqwest::Method::PUT, &format!("/memories/{id}"), "put-1", Some(update.clone())).await;
    assert_eq!(put.status, 200, "{}", put.body);
    let put_again = send(&server, reqwest::Method::PUT, &format!("/memories/{id}"), "put-1", Some(update)).await;
    assert_eq!(put_again.body, put.body);
    let history = server.get(&format!("/memories/{id}/history")).await;
    assert_eq!(history.body.as_array().map(Vec::len), Some(2), "one ADD, one UPDATE: {}", history.body);

    let deleted = send(&server, reqwest::Method::DELETE, &format!("/memories/{id}"), "del-1", None).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let deleted_again = send(&server, reqwest::Method::DELETE, &format!("/memories/{id}"), "del-1", None).await;
    assert_eq!((deleted_again.status, &deleted_again.body), (200, &deleted.body), "replayed, not 404");
    server.delete(&format!("/memories/{id}")).await.assert_error(404, "memory_not_found");
    // An error answered under a key carries its request's id like any other.
    let missing = send(&server, reqwest::Method::DELETE, &format!("/memories/{id}"), "del-2", None).await;
    missing.assert_error(404, "memory_not_found");
    let header = missing.headers.get("x-request-id").and_then(|value| value.to_str().ok()).expect("x-request-id");
    assert_eq!(missing.body["request_id"], header);

    for bad in ["", "with space", &"k".repeat(256)] {
        let reply = send(&server, reqwest::Method::DELETE, &format!("/memories/{id}"), bad, None).await;
        reply.assert_error(400, "validation_failed");
    }
    let key =
        send(&server, reqwest::Method::POST, "/api-keys", "key-1", Some(json!({"label": "x", "role": "read"}))).await;
    key.assert_error(400, "validation_failed");
    // Reads ignore the header, searches included: nothing is kept or replayed.
    assert_eq!(send(&server, reqwest::Method::GET, "/memories?user_id=ida", "get-1", None).await.status, 200);
    let search = json!({"query": "figs", "user_id": "ida"});
    let before = send(&server, reqwest::Method::POST, "/search", "search-1", Some(search.clone())).await;
    server.add_texts("ida", &["Ida grows figs on the balcony"], json!({})).await;
    let after = send(&server, reqwest::Method::POST, "/search", "search-1", Some(search)).await;
    assert!(after.headers.get("idempotent-replayed").is_none());
    assert_ne!(before.body["results"], after.body["results"], "a fresh search, not a replay");
}
