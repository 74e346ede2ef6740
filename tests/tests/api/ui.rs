//! The dashboard's server side: the page and its assets with a strict Content-Security-Policy,
//! what the page learns before signing in, and `GET /me`, from which it hides what the caller may
//! not do. (The page itself runs in headless Chromium: tests/ui/test_ui.py, scripts/clients.sh.)

use mem0_http_tests::{local_embedder, test_settings, TestServer};
use serde_json::{json, Value};

const ADMIN_KEY: &str = "ui-admin-key-0123456789-abcdefghijklmnopq";

async fn get(server: &TestServer, path: &str, key: Option<&str>) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = server.client.get(format!("{}{path}", server.base));
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.expect("body"))
}

#[tokio::test]
async fn the_page_loads_nothing_from_elsewhere_and_knows_whether_keys_are_needed() {
    let mut settings = test_settings();
    settings.auth.disabled = false;
    settings.auth.admin_api_key = Some(ADMIN_KEY.to_owned().into());
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let (status, headers, page) = get(&server, "/ui", None).await;
    assert_eq!(status, 200);
    let policy = headers["content-security-policy"].to_str().expect("policy");
    assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"), "{policy}");
    assert!(policy.contains("connect-src 'self'") && policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(!page.contains("http://") && !page.contains("https://"), "nothing external: {page}");
    for (asset, kind) in [("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css")] {
        let (status, headers, body) = get(&server, asset, None).await;
        assert_eq!(status, 200, "{asset}");
        assert!(headers["content-type"].to_str().expect("type").starts_with(kind), "{asset}");
        assert!(!body.contains("https://") && !body.contains("http://"), "{asset} loads nothing external");
    }
    let (_, _, script) = get(&server, "/ui/app.js", None).await;
    assert!(!script.contains("innerHTML") && !script.contains("document.cookie"), "texts go in as text; no cookies");
    let (status, _, settings) = get(&server, "/ui/settings.json", None).await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&settings).expect("json"), json!({"auth": true}));

    // Without authentication (local development) the page needs no sign-in.
    let open = TestServer::start_with(test_settings(), local_embedder().await).await;
    let (_, _, settings) = get(&open, "/ui/settings.json", None).await;
    assert_eq!(serde_json::from_str::<Value>(&settings).expect("json"), json!({"auth": false}));
}

#[tokio::test]
async fn me_tells_the_caller_its_tenant_role_and_reach() {
    let mut settings = test_settings();
    settings.auth.disabled = false;
    settings.auth.admin_api_key = Some(ADMIN_KEY.to_owned().into());
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let (status, _, body) = get(&server, "/me", None).await;
    assert_eq!(status, 401, "{body}");
    let (status, _, body) = get(&server, "/me", Some(ADMIN_KEY)).await;
    assert_eq!(status, 200, "{body}");
    let admin: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(admin["role"], "admin");
    assert_eq!(admin["global_admin"], true);
    assert_eq!(admin["user_ids"], Value::Null);

    let created: Value = server
        .client
        .post(format!("{}/api-keys", server.base))
        .header("x-api-key", ADMIN_KEY)
        .json(&json!({"label": "alice reader", "role": "read", "user_ids": ["alice"], "tenant": "acme"}))
        .send()
        .await
        .expect("create key")
        .json()
        .await
        .expect("json");
    let key = created["key"].as_str().expect("key");
    let (status, _, body) = get(&server, "/me", Some(key)).await;
    assert_eq!(status, 200, "{body}");
    let me: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        me,
        json!({"tenant": "acme", "principal_id": format!("key:{}", created["id"].as_str().expect("id")), "role": "read", "user_ids": ["alice"],
               "agent_ids": null, "tenant_admin": false, "global_admin": false})
    );
}
