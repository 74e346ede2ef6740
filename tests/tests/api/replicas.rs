//! Two replicas on one Postgres database (`memory.history.provider = "postgres"`): each has its
//! own pools, caches and runtime state, and shares API keys, history, the conversation buffer
//! and the runtime configuration with the other through the database.

use std::time::{Duration, Instant};

use mem0_http_tests::{chat_completion, local_embedder, test_settings, Reply, StoreKind, TestServer};
use mem0_server::config::Settings;
use reqwest::Method;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

const ADMIN_KEY: &str = "bootstrap-admin-key-0123456789-abcdefghij";

fn settings() -> Settings {
    let mut settings = test_settings();
    settings.auth.disabled = false;
    settings.auth.admin_api_key = Some(ADMIN_KEY.to_owned().into());
    settings.configure.poll_secs = 1;
    settings
}

async fn call(server: &TestServer, key: &str, method: Method, path: &str, body: Option<Value>) -> Reply {
    let mut request = server.client.request(method, format!("{}{path}", server.base)).header("x-api-key", key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    Reply::read_public(request.send().await.expect("send")).await
}

async fn replicas() -> (TestServer, TestServer) {
    let a = TestServer::start_on(StoreKind::Postgres, settings(), local_embedder().await).await;
    let b = a.start_replica(settings(), local_embedder().await).await;
    (a, b)
}

/// A fake OpenAI-compatible LLM extracting `fact` from whatever it is sent.
async fn fake_llm(fact: &str) -> MockServer {
    let llm = MockServer::start().await;
    let content = json!({"facts": [{"text": fact}]}).to_string();
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(chat_completion(&content))
        .mount(&llm)
        .await;
    llm
}

/// Waits until `server`'s `/configure` view satisfies `done`; returns how long it took.
async fn until_configured(server: &TestServer, done: impl Fn(&Value) -> bool) -> Duration {
    let started = Instant::now();
    loop {
        let view = call(server, ADMIN_KEY, Method::GET, "/configure", None).await;
        if done(&view.body) {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(15), "the change never reached the replica: {}", view.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn two_replicas_share_keys_history_buffer_and_configuration() {
    let (a, b) = replicas().await;
    // A key created through A authenticates on B.
    let created = call(&a, ADMIN_KEY, Method::POST, "/api-keys", Some(json!({"label": "svc", "role": "write"}))).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let key = created.body["key"].as_str().expect("key").to_owned();
    let key_id = created.body["id"].as_str().expect("id").to_owned();
    assert_eq!(call(&b, &key, Method::GET, "/memories?user_id=ann", None).await.status, 200);

    // An add through A has its history on B.
    let body = json!({"messages": [{"role": "user", "content": "I keep bees"}], "user_id": "ann", "infer": false});
    let added = call(&a, &key, Method::POST, "/memories", Some(body)).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let id = added.body["results"][0]["id"].as_str().expect("id").to_owned();
    let history = call(&b, &key, Method::GET, &format!("/memories/{id}/history"), None).await;
    assert_eq!(history.status, 200, "{}", history.body);
    assert_eq!(history.body[0]["event"], "ADD");

    // An LLM configured through A is in effect on B within the poll interval (1 s here).
    let llm = fake_llm("User lives in Bergen").await;
    let change = json!({"llm": {"provider": "openai", "openai": {"model": "fake-chat", "base_url": format!("{}/v1", llm.uri())}}});
    let reply = call(&a, ADMIN_KEY, Method::POST, "/configure", Some(change)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let took = until_configured(&b, |view| view["llm"]["in_use"]["model"] == "fake-chat").await;
    assert!(took < Duration::from_secs(5), "reached B in {took:?}");

    // A conversation alternating between the replicas: B's extraction sees the turn said to A.
    let turn = |text: &str| json!({"messages": [{"role": "user", "content": text}], "user_id": "cat"});
    assert_eq!(call(&a, &key, Method::POST, "/memories", Some(turn("I grew up in Oslo"))).await.status, 200);
    assert_eq!(call(&b, &key, Method::POST, "/memories", Some(turn("Last month I moved west"))).await.status, 200);
    let prompts: Vec<String> = llm
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|request| String::from_utf8_lossy(&request.body).into_owned())
        .collect();
    assert_eq!(prompts.len(), 2);
    assert!(prompts[1].contains("I grew up in Oslo"), "B's prompt carries A's turn: {}", prompts[1]);

    // A retry through B of an add sent to A with an Idempotency-Key gets A's response.
    let body = json!({"messages": [{"role": "user", "content": "I sail"}], "user_id": "ann", "infer": false});
    let send = |server: &TestServer| {
        server
            .client
            .post(format!("{}/memories", server.base))
            .header("x-api-key", &key)
            .header("Idempotency-Key", "sail-1")
            .json(&body)
            .send()
    };
    let first = Reply::read_public(send(&a).await.expect("send")).await;
    let retried = Reply::read_public(send(&b).await.expect("send")).await;
    assert_eq!((retried.status, &retried.body), (200, &first.body), "replayed across replicas");
    assert_eq!(retried.headers.get("idempotent-replayed").and_then(|value| value.to_str().ok()), Some("true"));

    // A key revoked through A is refused by B at once.
    let revoked = call(&a, ADMIN_KEY, Method::DELETE, &format!("/api-keys/{key_id}"), None).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    call(&b, &key, Method::GET, "/memories?user_id=ann", None).await.assert_error(401, "unauthenticated");
    let ready = b.get("/ready").await;
    assert_eq!(ready.status, 200);
    assert!(ready.body.get("detail").is_none(), "{}", ready.body);
}

/// A change one replica accepts but another cannot apply (here B refuses link-local provider
/// URLs, A allows them) leaves B on its running configuration and says why in B's `/ready`;
/// a later change B can apply clears it.
#[tokio::test]
async fn a_replica_that_cannot_apply_a_change_keeps_its_configuration_and_says_so() {
    let mut lenient = settings();
    lenient.configure.allow_link_local_base_urls = true;
    let a = TestServer::start_on(StoreKind::Postgres, lenient, local_embedder().await).await;
    let b = a.start_replica(settings(), local_embedder().await).await;
    let change =
        json!({"llm": {"provider": "openai", "openai": {"model": "inside", "base_url": "http://169.254.169.254/v1"}}});
    let reply = call(&a, ADMIN_KEY, Method::POST, "/configure", Some(change)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let started = Instant::now();
    let detail = loop {
        let ready = b.get("/ready").await;
        assert_eq!(ready.status, 200, "B still serves: {}", ready.body);
        if let Some(detail) = ready.body["detail"].as_str() {
            break detail.to_owned();
        }
        assert!(started.elapsed() < Duration::from_secs(15), "B never reported the change");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(detail.contains("not applied"), "{detail}");
    let view = call(&b, ADMIN_KEY, Method::GET, "/configure", None).await;
    assert_ne!(view.body["llm"]["in_use"]["model"], "inside", "B kept its configuration: {}", view.body);

    let llm = fake_llm("anything").await;
    let change =
        json!({"llm": {"provider": "openai", "openai": {"model": "outside", "base_url": format!("{}/v1", llm.uri())}}});
    assert_eq!(call(&a, ADMIN_KEY, Method::POST, "/configure", Some(change)).await.status, 200);
    until_configured(&b, |view| view["llm"]["in_use"]["model"] == "outside").await;
    assert!(b.get("/ready").await.body.get("detail").is_none(), "cleared once a later change applied");
}

/// The same conversation added 16 times at once, split over both replicas (a client retrying,
/// two workers replaying a queue): one memory. Then 16 verbatim adds at once, each naming the
/// same new place: one entity row for the scope.
#[tokio::test]
async fn concurrent_writes_through_two_replicas_store_one_memory_and_one_entity() {
    let llm = fake_llm("User is planning a trip to Zanzibar").await;
    let mut with_llm = settings();
    with_llm.memory.llm.provider = mem0_core::providers::llm::LlmProvider::Openai;
    with_llm.memory.llm.openai.base_url = Some(format!("{}/v1", llm.uri()));
    with_llm.memory.llm.openai.model = "fake-chat".to_owned();
    let a = TestServer::start_on(StoreKind::Postgres, with_llm.clone(), local_embedder().await).await;
    let b = a.start_replica(with_llm, local_embedder().await).await;
    let conversation =
        json!({"messages": [{"role": "user", "content": "Thinking about Zanzibar in March"}], "user_id": "dee"});
    let adds = (0..16).map(|index| {
        let server = if index % 2 == 0 { &a } else { &b };
        call(server, ADMIN_KEY, Method::POST, "/memories", Some(conversation.clone()))
    });
    let replies = futures::future::join_all(adds).await;
    assert!(replies.iter().all(|reply| reply.status == 200), "every add answered 200");
    let stored: usize = replies.iter().map(|reply| reply.body["results"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(stored, 1, "exactly one add reports the new memory");
    let listed = call(&b, ADMIN_KEY, Method::GET, "/memories?user_id=dee", None).await;
    assert_eq!(listed.body["results"].as_array().map(Vec::len), Some(1), "{}", listed.body);

    let adds = (0..16).map(|index| {
        let server = if index % 2 == 0 { &a } else { &b };
        let text = format!("Note {index}: the ferry to Pemba Island leaves at dawn");
        let body = json!({"messages": [{"role": "user", "content": text}], "user_id": "eve", "infer": false});
        call(server, ADMIN_KEY, Method::POST, "/memories", Some(body))
    });
    let replies = futures::future::join_all(adds).await;
    assert!(replies.iter().all(|reply| reply.status == 200), "every add answered 200");
    let rows = a
        .history_sql(
            "",
            "select count(*)::text from memories_entities where user_id = 'eve' and normalized like '%pemba%'",
        )
        .await;
    assert_eq!(rows.as_deref(), Some("1"), "one entity row for the scope");
}
