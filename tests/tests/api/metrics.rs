//! `/metrics`: who may read it, the listener without credentials, provider retries and LLM
//! tokens per tenant, store operations per store, and requests whose client went away. The
//! families are the process's (one server per process in production), and tests run side by
//! side here, so these check series of their own (a tenant of their own) exactly and shared
//! series by how much they moved at least. Exact counts of every request, read with the
//! Prometheus project's own parser: tests/metrics/test_metrics.py (scripts/clients.sh).

use std::time::Duration;

use mem0_http_tests::{local_embedder, settings_with_fake_llm, test_settings, StoreKind, TestServer};
use mem0_server::config::Settings;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const ADMIN_KEY: &str = "metrics-admin-key-0123456789-abcdefghijkl";

fn secured(mut settings: Settings) -> Settings {
    settings.auth.disabled = false;
    settings.auth.admin_api_key = Some(ADMIN_KEY.to_owned().into());
    settings
}

/// `GET path` with `key` (none: no credentials): status, content type and body text.
async fn get(base: &str, path: &str, key: Option<&str>) -> (u16, String, String) {
    let mut request = reqwest::Client::new().get(format!("{base}{path}"));
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned();
    (status, content_type, response.text().await.expect("body"))
}

/// The value of the sample `series` (name and labels, exactly as printed), 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

async fn scrape(server: &TestServer) -> String {
    let (status, content_type, text) = get(&server.base, "/metrics", Some(ADMIN_KEY)).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    text
}

async fn post(server: &TestServer, path: &str, key: &str, body: Value) -> (u16, Value) {
    let response = server
        .client
        .post(format!("{}{path}", server.base))
        .header("x-api-key", key)
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn metrics_need_the_global_admin_and_can_be_switched_off() {
    let server = TestServer::start_with(secured(test_settings()), local_embedder().await).await;
    let (status, _, body) = get(&server.base, "/metrics", None).await;
    assert_eq!(status, 401, "{body}");
    let (status, key) =
        post(&server, "/api-keys", ADMIN_KEY, json!({"label": "acme admin", "role": "admin", "tenant": "acme"})).await;
    assert_eq!(status, 201, "{key}");
    let tenant_admin = key["key"].as_str().expect("key");
    let (status, _, body) = get(&server.base, "/metrics", Some(tenant_admin)).await;
    assert_eq!(status, 403, "a tenant's admin reads no other tenant's figures: {body}");
    let text = scrape(&server).await;
    assert!(text.contains("# TYPE mem0_http_request_duration_seconds histogram"), "{text}");
    assert!(
        sample(&text, r#"mem0_http_request_duration_seconds_count{method="GET",route="/metrics",status="403"}"#) >= 1.0
    );
    assert!(text.contains(r#"mem0_build_info{version=""#), "{text}");

    let mut off = secured(test_settings());
    off.metrics.enabled = false;
    let server = TestServer::start_with(off, local_embedder().await).await;
    let (status, _, body) = get(&server.base, "/metrics", Some(ADMIN_KEY)).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("route_not_found"), "{body}");
}

#[tokio::test]
async fn the_metrics_listener_serves_only_metrics_without_credentials() {
    let mut settings = secured(test_settings());
    settings.metrics.listen = Some("127.0.0.1:0".parse().expect("address"));
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let base = server.metrics_base.clone().expect("a metrics listener");
    let (status, content_type, text) = get(&base, "/metrics", None).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    // The pools and the queue are sampled at each scrape.
    let store = match server.kind {
        StoreKind::Sqlite => "sqlite",
        StoreKind::Pgvector | StoreKind::Postgres => "pgvector",
    };
    assert!(sample(&text, &format!(r#"mem0_db_pool_max_connections{{pool="{store}"}}"#)) >= 1.0, "{text}");
    assert!(text.contains("\nmem0_jobs_open "), "{text}");
    // Nothing else is served there, and the API listener still wants credentials.
    let (status, _, _) = get(&base, "/memories?user_id=u", None).await;
    assert_eq!(status, 404);
    let (status, _, _) = get(&server.base, "/metrics", None).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn provider_retries_tokens_and_store_operations_are_counted() {
    let llm = MockServer::start().await;
    // The provider throttles the first call once, then answers with 800 + 60 tokens.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "0"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&llm)
        .await;
    let fact = json!({"text": "User keeps bees", "attributed_to": "user", "entities": []});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": json!({"facts": [fact]}).to_string()},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 800, "completion_tokens": 60}
        })))
        .mount(&llm)
        .await;
    let mut settings = secured(settings_with_fake_llm(&llm.uri()));
    // A tenant of this test's own: its token series are exact.
    let tenant = format!("metrics-{}", uuid::Uuid::new_v4().simple());
    settings.server.default_tenant.clone_from(&tenant);
    settings.memory.llm.openai.retry.base_delay_ms = 1;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let store = match server.kind {
        StoreKind::Sqlite => "sqlite",
        StoreKind::Pgvector | StoreKind::Postgres => "pgvector",
    };
    let retried = r#"mem0_provider_requests_total{provider="openai",service="llm",outcome="provider_rate_limited"}"#;
    let retries = r#"mem0_provider_retries_total{provider="openai",service="llm"}"#;
    let applied =
        format!(r#"mem0_store_operation_duration_seconds_count{{store="{store}",operation="apply",outcome="ok"}}"#);
    let before = scrape(&server).await;

    let mut ids = Vec::new();
    for text in ["I keep bees in the garden", "The hives are behind the shed"] {
        let (status, body) = post(
            &server,
            "/memories",
            ADMIN_KEY,
            json!({"messages": [{"role": "user", "content": text}], "user_id": "u"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        ids.extend(body["results"].as_array().expect("results").iter().map(|result| result["id"].to_string()));
    }
    assert!(!ids.is_empty(), "the first add stored its fact (the second finds it there)");
    let after = scrape(&server).await;
    let tokens = |text: &str, kind: &str| {
        sample(text, &format!(r#"mem0_llm_tokens_total{{tenant="{tenant}",model="fake-chat",type="{kind}"}}"#))
    };
    assert_eq!(tokens(&after, "prompt"), 1_600.0, "{after}");
    assert_eq!(tokens(&after, "completion"), 120.0);
    let calls = format!(r#"mem0_llm_calls_total{{tenant="{tenant}",model="fake-chat",purpose="extraction"}}"#);
    assert_eq!(sample(&after, &calls), 2.0);
    assert!(sample(&after, retried) - sample(&before, retried) >= 1.0, "the 429 is counted");
    assert!(sample(&after, retries) - sample(&before, retries) >= 1.0, "and so is the retry");
    assert!(sample(&after, &applied) - sample(&before, &applied) >= 2.0, "{after}");
    // Ids never become label values.
    for id in &ids {
        assert!(!after.contains(id.trim_matches('"')), "{id} in {after}");
    }
}

#[tokio::test]
async fn a_request_whose_client_hangs_up_is_counted_as_499() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(mem0_http_tests::chat_completion(r#"{"facts": []}"#).set_delay(Duration::from_secs(3)))
        .mount(&llm)
        .await;
    let server = TestServer::start_with(secured(settings_with_fake_llm(&llm.uri())), local_embedder().await).await;
    let cut = r#"mem0_http_request_duration_seconds_count{method="POST",route="/memories",status="499"}"#;
    let in_flight = "mem0_http_requests_in_flight";
    let before = sample(&scrape(&server).await, cut);
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().expect("client");
    let sent = impatient
        .post(format!("{}/memories", server.base))
        .header("x-api-key", ADMIN_KEY)
        .json(&json!({"messages": [{"role": "user", "content": "I keep bees"}], "user_id": "u"}))
        .send()
        .await;
    assert!(sent.is_err(), "the client gave up first");
    // The server notices the closed connection and drops the handler.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(&server).await;
        if sample(&text, cut) > before {
            // Only the scrape itself is in flight now (other tests' requests may be too).
            assert!(sample(&text, in_flight) >= 1.0);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no 499 counted: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
