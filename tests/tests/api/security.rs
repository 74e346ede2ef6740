//! The security suite: every protected route against missing, wrong, revoked and forged
//! credentials; tenants and user-bound keys that must not see each other; filter tricks; admin
//! routes; rate limits; unsafe startup settings.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mem0_http_tests::{local_embedder, test_settings, Reply, TestServer};
use mem0_server::config::Settings;
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN_KEY: &str = "bootstrap-admin-key-0123456789-abcdefghij";
const HS_SECRET: &str = "hs256-test-secret-0123456789-abcdefghijklmnop";
const RSA_PRIVATE: &str = include_str!("../../fixtures/rsa-private.pem");
const RSA_PUBLIC: &str = include_str!("../../fixtures/rsa-public.pem");
const EC_PRIVATE: &str = include_str!("../../fixtures/ec-private.pem");

fn secure_settings() -> Settings {
    let mut settings = test_settings();
    settings.auth.disabled = false;
    settings.auth.admin_api_key = Some(ADMIN_KEY.to_owned().into());
    settings.auth.jwt.hs256_secret = Some(HS_SECRET.to_owned().into());
    settings.auth.jwt.public_key_pem = Some(RSA_PUBLIC.to_owned());
    settings.auth.jwt.audience = Some("mem0".to_owned());
    settings.auth.jwt.issuer = Some("https://id.test".to_owned());
    // The matrix sends hundreds of bad-credential requests from one address.
    settings.rate_limit.open_per_minute = 10_000;
    settings
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs() as i64).unwrap_or_default()
}

fn claims(tenant: &str, subject: &str, roles: &[&str]) -> Value {
    json!({"tenant": tenant, "sub": subject, "roles": roles, "aud": "mem0", "iss": "https://id.test", "iat": now(), "exp": now() + 600})
}

fn sign(algorithm: Algorithm, claims: &Value) -> String {
    let key = match algorithm {
        Algorithm::HS256 => EncodingKey::from_secret(HS_SECRET.as_bytes()),
        Algorithm::RS256 => EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).expect("rsa key"),
        Algorithm::ES256 => EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).expect("ec key"),
        other => panic!("no test key for {other:?}"),
    };
    jsonwebtoken::encode(&Header::new(algorithm), claims, &key).expect("sign")
}

/// Who is calling, as headers.
#[derive(Clone, Debug)]
enum As {
    Nobody,
    Key(String),
    TokenScheme(String),
    Bearer(String),
}

async fn call(server: &TestServer, who: &As, method: Method, path: &str, body: Option<Value>) -> Reply {
    let mut request = server.client.request(method, format!("{}{path}", server.base));
    request = match who {
        As::Nobody => request,
        As::Key(key) => request.header("x-api-key", key),
        As::TokenScheme(key) => request.header("authorization", format!("Token {key}")),
        As::Bearer(token) => request.header("authorization", format!("Bearer {token}")),
    };
    if let Some(body) = body {
        request = request.json(&body);
    }
    Reply::read_public(request.send().await.expect("send")).await
}

/// Two tenants, keys of every kind, and one memory per (tenant, user).
struct World {
    server: TestServer,
    admin: As,
    acme_admin: As,
    alice_writer: As,
    acme_reader: As,
    globex_writer: As,
    revoked: As,
    alice_memory: String,
    bob_memory: String,
    globex_memory: String,
    globex_key_id: String,
}

async fn create_key(server: &TestServer, creator: &As, body: Value) -> (String, String) {
    let reply = call(server, creator, Method::POST, "/api-keys", Some(body.clone())).await;
    assert_eq!(reply.status, 201, "create key {body}: {}", reply.body);
    let key = reply.body["key"].as_str().expect("key shown once").to_owned();
    (key, reply.body["id"].as_str().expect("id").to_owned())
}

async fn add(server: &TestServer, who: &As, user: &str, text: &str) -> Reply {
    let body = json!({"messages": [{"role": "user", "content": text}], "user_id": user, "infer": false});
    call(server, who, Method::POST, "/memories", Some(body)).await
}

fn first_id(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["results"][0]["id"].as_str().expect("id").to_owned()
}

async fn world() -> World {
    let server = TestServer::start_with(secure_settings(), local_embedder().await).await;
    let admin = As::Key(ADMIN_KEY.to_owned());
    let (acme_admin, _) =
        create_key(&server, &admin, json!({"label": "acme admin", "role": "admin", "tenant": "acme"})).await;
    let acme_admin = As::Key(acme_admin);
    let (alice, _) =
        create_key(&server, &acme_admin, json!({"label": "alice app", "role": "write", "user_ids": ["alice"]})).await;
    let (reader, _) = create_key(&server, &acme_admin, json!({"label": "analytics", "role": "read"})).await;
    let (globex, globex_key_id) =
        create_key(&server, &admin, json!({"label": "globex", "role": "write", "tenant": "globex"})).await;
    let (revoked, revoked_id) = create_key(&server, &acme_admin, json!({"label": "old", "role": "write"})).await;
    let reply = call(&server, &acme_admin, Method::DELETE, &format!("/api-keys/{revoked_id}"), None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    let alice_writer = As::Key(alice);
    let alice_memory = first_id(&add(&server, &alice_writer, "alice", "alice likes oolong tea").await);
    let bob_memory = first_id(&add(&server, &acme_admin, "bob", "bob likes espresso").await);
    let globex_writer = As::Key(globex);
    let globex_memory = first_id(&add(&server, &globex_writer, "alice", "globex alice likes matcha").await);
    World {
        server,
        admin,
        acme_admin,
        alice_writer,
        acme_reader: As::Key(reader),
        globex_writer,
        revoked: As::Key(revoked),
        alice_memory,
        bob_memory,
        globex_memory,
        globex_key_id,
    }
}

/// Every protected route with a valid body.
fn protected_routes(memory: &str) -> Vec<(Method, String, Option<Value>)> {
    vec![
        (
            Method::POST,
            "/memories".into(),
            Some(json!({"messages": [{"role": "user", "content": "x"}], "user_id": "alice", "infer": false})),
        ),
        (Method::GET, "/memories?user_id=alice".into(), None),
        (Method::GET, format!("/memories/{memory}"), None),
        (Method::PUT, format!("/memories/{memory}"), Some(json!({"text": "changed"}))),
        (Method::DELETE, format!("/memories/{memory}"), None),
        (Method::DELETE, "/memories?user_id=alice".into(), None),
        (Method::GET, format!("/memories/{memory}/history"), None),
        (Method::POST, "/search".into(), Some(json!({"query": "tea", "user_id": "alice"}))),
        (Method::POST, "/reset".into(), None),
        (Method::GET, "/entities".into(), None),
        (Method::DELETE, "/entities/user/alice".into(), None),
        (Method::GET, "/requests".into(), None),
        (Method::GET, "/audit".into(), None),
        (Method::POST, "/api-keys".into(), Some(json!({"label": "x", "role": "read"}))),
        (Method::GET, "/api-keys".into(), None),
        (Method::DELETE, format!("/api-keys/{}", uuid::Uuid::new_v4()), None),
        (Method::GET, "/configure".into(), None),
        (Method::POST, "/configure".into(), Some(json!({"embedder": {"provider": "local"}}))),
        (Method::GET, "/configure/providers".into(), None),
        (Method::GET, "/policy".into(), None),
        (Method::PUT, "/policy".into(), Some(json!({"emails": "redact"}))),
        (Method::POST, "/webhooks".into(), Some(json!({"url": "http://127.0.0.1:9/hook"}))),
        (Method::GET, "/webhooks".into(), None),
        (Method::GET, format!("/webhooks/{}", uuid::Uuid::new_v4()), None),
        (Method::PATCH, format!("/webhooks/{}", uuid::Uuid::new_v4()), Some(json!({"enabled": false}))),
        (Method::DELETE, format!("/webhooks/{}", uuid::Uuid::new_v4()), None),
        (Method::GET, format!("/webhooks/{}/deliveries", uuid::Uuid::new_v4()), None),
        (Method::GET, "/export?user_id=alice".into(), None),
        (Method::POST, "/import".into(), Some(json!({"type": "end", "count": 0}))),
        (Method::GET, "/usage".into(), None),
        (Method::GET, "/metrics".into(), None),
        (Method::GET, "/me".into(), None),
        // Unknown routes and methods are behind the guard too: no probing without credentials.
        (Method::GET, "/nope".into(), None),
        (Method::PATCH, "/memories".into(), None),
    ]
}

#[tokio::test]
async fn bad_credentials_are_401_on_every_protected_route() {
    let world = world().await;
    let server = &world.server;
    let expired = sign(
        Algorithm::HS256,
        &json!({"tenant": "acme", "sub": "alice", "aud": "mem0", "iss": "https://id.test", "exp": now() - 3600}),
    );
    let wrong_audience = sign(
        Algorithm::HS256,
        &json!({"tenant": "acme", "sub": "alice", "aud": "other", "iss": "https://id.test", "exp": now() + 600}),
    );
    let wrong_issuer = sign(
        Algorithm::HS256,
        &json!({"tenant": "acme", "sub": "alice", "aud": "mem0", "iss": "https://evil.test", "exp": now() + 600}),
    );
    let not_yet = sign(
        Algorithm::HS256,
        &json!({"tenant": "acme", "sub": "alice", "aud": "mem0", "iss": "https://id.test", "nbf": now() + 3600, "exp": now() + 7200}),
    );
    let no_tenant =
        sign(Algorithm::HS256, &json!({"sub": "alice", "aud": "mem0", "iss": "https://id.test", "exp": now() + 600}));
    // With an issuer and an audience configured, the claims are required, not only checked.
    let no_issuer = sign(
        Algorithm::HS256,
        &json!({"tenant": "acme", "sub": "alice", "roles": ["admin"], "aud": "mem0", "exp": now() + 600}),
    );
    let no_audience = sign(
        Algorithm::HS256,
        &json!({"tenant": "acme", "sub": "alice", "roles": ["admin"], "iss": "https://id.test", "exp": now() + 600}),
    );
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims("acme", "alice", &["admin"]).to_string())
    );
    // HS256 signed with the RSA public key as the HMAC secret: the classic algorithm confusion.
    let confused = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims("acme", "alice", &["admin"]),
        &EncodingKey::from_secret(RSA_PUBLIC.as_bytes()),
    )
    .expect("sign");
    let tampered = {
        let token = sign(Algorithm::HS256, &claims("acme", "alice", &["write"]));
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = URL_SAFE_NO_PAD.encode(claims("acme", "alice", &["admin"]).to_string());
        parts.join(".")
    };
    let es_not_configured = sign(Algorithm::ES256, &claims("acme", "alice", &["write"]));
    let callers = [
        ("no credentials", As::Nobody),
        ("unknown key", As::Key("m0sk_thisisnotarealkeyatall0000000000000000000".into())),
        ("garbage key", As::Key("hunter2".into())),
        ("near-miss admin key", As::Key(format!("{ADMIN_KEY}x"))),
        ("revoked key", world.revoked.clone()),
        ("expired jwt", As::Bearer(expired)),
        ("wrong-audience jwt", As::Bearer(wrong_audience)),
        ("wrong-issuer jwt", As::Bearer(wrong_issuer)),
        ("not-yet-valid jwt", As::Bearer(not_yet)),
        ("jwt without tenant", As::Bearer(no_tenant)),
        ("jwt without iss", As::Bearer(no_issuer)),
        ("jwt without aud", As::Bearer(no_audience)),
        ("alg none jwt", As::Bearer(unsigned)),
        ("hs/rs confusion jwt", As::Bearer(confused)),
        ("tampered jwt", As::Bearer(tampered)),
        ("es256 jwt without an es key", As::Bearer(es_not_configured)),
        ("garbage bearer", As::Bearer("not.a.jwt".into())),
    ];
    for (name, who) in &callers {
        for (method, path, body) in protected_routes(&world.alice_memory) {
            let reply = call(server, who, method.clone(), &path, body).await;
            reply.assert_error(401, "unauthenticated");
            assert!(reply.headers.contains_key("www-authenticate"), "{name}: {method} {path}");
        }
    }
    // Nothing changed.
    let reply = call(server, &world.acme_admin, Method::GET, &format!("/memories/{}", world.alice_memory), None).await;
    assert_eq!(reply.body["memory"], "alice likes oolong tea");
    // With credentials, the same requests learn what is wrong with them.
    call(server, &world.acme_admin, Method::GET, "/nope", None).await.assert_error(404, "route_not_found");
    call(server, &world.acme_admin, Method::PATCH, "/memories", None).await.assert_error(405, "method_not_allowed");
    // Unsupported schemes are refused, not ignored.
    let raw = server
        .client
        .get(format!("{}/memories?user_id=alice", server.base))
        .header("authorization", "Basic YWxpY2U6cGFzcw==")
        .send()
        .await
        .expect("send");
    Reply::read_public(raw).await.assert_error(401, "unauthenticated");
}

#[tokio::test]
async fn open_routes_need_no_credentials() {
    let world = world().await;
    for path in ["/health", "/ready", "/openapi.json"] {
        assert_eq!(call(&world.server, &As::Nobody, Method::GET, path, None).await.status, 200, "{path}");
    }
}

#[tokio::test]
async fn tenants_never_see_each_other() {
    let world = world().await;
    let server = &world.server;
    for (method, path, body) in [
        (Method::GET, format!("/memories/{}", world.alice_memory), None),
        (Method::PUT, format!("/memories/{}", world.alice_memory), Some(json!({"text": "pwned"}))),
        (Method::DELETE, format!("/memories/{}", world.alice_memory), None),
        (Method::GET, format!("/memories/{}/history", world.alice_memory), None),
    ] {
        call(server, &world.globex_writer, method, &path, body).await.assert_error(404, "memory_not_found");
    }
    // Same user id, other tenant: only the caller's own tenant's memories.
    let reply = call(server, &world.globex_writer, Method::GET, "/memories?user_id=alice", None).await;
    assert_eq!(mem0_http_tests::texts(&reply.body["results"]), ["globex alice likes matcha"]);
    let reply = call(
        server,
        &world.globex_writer,
        Method::POST,
        "/search",
        Some(json!({"query": "tea", "user_id": "alice", "threshold": 0.0})),
    )
    .await;
    assert_eq!(mem0_http_tests::texts(&reply.body["results"]), ["globex alice likes matcha"]);
    // The acme admin cannot reach globex either.
    call(server, &world.acme_admin, Method::GET, &format!("/memories/{}", world.globex_memory), None)
        .await
        .assert_error(404, "memory_not_found");
    call(server, &world.acme_admin, Method::DELETE, &format!("/api-keys/{}", world.globex_key_id), None)
        .await
        .assert_error(404, "api_key_not_found");
    let reply = call(server, &world.acme_admin, Method::GET, "/api-keys", None).await;
    let tenants: Vec<&str> = reply.body["results"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|key| key["tenant"].as_str().expect("tenant"))
        .collect();
    assert!(!tenants.is_empty() && tenants.iter().all(|tenant| *tenant == "acme"), "{tenants:?}");
    let listed = reply.body["results"].as_array().expect("keys");
    assert!(listed.iter().all(|key| key.get("key").is_none()), "secrets are never listed: {}", reply.body);
    // Tenant admins cannot mint keys elsewhere.
    call(
        server,
        &world.acme_admin,
        Method::POST,
        "/api-keys",
        Some(json!({"label": "x", "role": "admin", "tenant": "globex"})),
    )
    .await
    .assert_error(403, "forbidden");
    // Entities stay in the tenant.
    let reply = call(server, &world.acme_admin, Method::GET, "/entities?type=user", None).await;
    let users: Vec<&str> =
        reply.body["results"].as_array().expect("entities").iter().map(|e| e["id"].as_str().expect("id")).collect();
    assert_eq!(users, ["alice", "bob"]);
    // A tenant reset leaves other tenants alone; a global reset needs the global admin.
    call(server, &world.acme_admin, Method::POST, "/reset?scope=global", None).await.assert_error(403, "forbidden");
    assert_eq!(call(server, &world.acme_admin, Method::POST, "/reset", None).await.status, 200);
    call(server, &world.acme_admin, Method::GET, &format!("/memories/{}", world.bob_memory), None)
        .await
        .assert_error(404, "memory_not_found");
    assert_eq!(
        call(server, &world.globex_writer, Method::GET, &format!("/memories/{}", world.globex_memory), None)
            .await
            .status,
        200
    );
    assert_eq!(call(server, &world.admin, Method::POST, "/reset?scope=global", None).await.status, 200);
    call(server, &world.globex_writer, Method::GET, &format!("/memories/{}", world.globex_memory), None)
        .await
        .assert_error(404, "memory_not_found");
}

#[tokio::test]
async fn user_bound_keys_stay_in_their_scope() {
    let world = world().await;
    let server = &world.server;
    let alice = &world.alice_writer;
    // Own scope works.
    assert_eq!(add(server, alice, "alice", "alice moved to Porto").await.status, 200);
    let reply = call(server, alice, Method::GET, "/memories?user_id=alice", None).await;
    assert_eq!(reply.status, 200);
    // Other users, or no user at all, are refused.
    add(server, alice, "bob", "written as bob").await.assert_error(403, "forbidden");
    call(server, alice, Method::GET, "/memories?user_id=bob", None).await.assert_error(403, "forbidden");
    call(server, alice, Method::GET, "/memories", None).await.assert_error(403, "forbidden");
    call(server, alice, Method::POST, "/search", Some(json!({"query": "coffee", "user_id": "bob"})))
        .await
        .assert_error(403, "forbidden");
    call(server, alice, Method::POST, "/search", Some(json!({"query": "coffee", "filters": {"agent_id": "x"}})))
        .await
        .assert_error(403, "forbidden");
    for (method, path, body) in [
        (Method::GET, format!("/memories/{}", world.bob_memory), None),
        (Method::PUT, format!("/memories/{}", world.bob_memory), Some(json!({"text": "pwned"}))),
        (Method::DELETE, format!("/memories/{}", world.bob_memory), None),
        (Method::GET, format!("/memories/{}/history", world.bob_memory), None),
    ] {
        call(server, alice, method, &path, body).await.assert_error(404, "memory_not_found");
    }
    // Filter tricks cannot widen the scope.
    for filters in [
        json!({"user_id": "alice", "OR": [{"user_id": "bob"}, {"user_id": {"ne": "alice"}}]}),
        json!({"user_id": "alice", "NOT": [{"user_id": "alice"}]}),
        json!({"user_id": "alice", "OR": [{"user_id": {"in": ["bob", "carol"]}}]}),
    ] {
        let reply = call(
            server,
            alice,
            Method::POST,
            "/search",
            Some(json!({"query": "coffee", "filters": filters, "threshold": 0.0})),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(
            reply.body["results"].as_array().expect("results").iter().all(|hit| hit["user_id"] == "alice"),
            "{filters}: {}",
            reply.body
        );
    }
    call(server, alice, Method::POST, "/search", Some(json!({"query": "coffee", "filters": {"user_id": "*"}})))
        .await
        .assert_error(400, "validation_failed");
    call(server, alice, Method::GET, "/memories?user_id=*", None).await.assert_error(400, "validation_failed");
    // The same holds for a JWT speaking for alice.
    let alice_token = As::Bearer(sign(Algorithm::HS256, &claims("acme", "alice", &["write"])));
    assert_eq!(
        call(server, &alice_token, Method::GET, &format!("/memories/{}", world.alice_memory), None).await.status,
        200
    );
    call(server, &alice_token, Method::GET, &format!("/memories/{}", world.bob_memory), None)
        .await
        .assert_error(404, "memory_not_found");
    call(server, &alice_token, Method::GET, "/memories?user_id=bob", None).await.assert_error(403, "forbidden");
    let rs_admin = As::Bearer(sign(Algorithm::RS256, &claims("acme", "ops", &["admin"])));
    assert_eq!(
        call(server, &rs_admin, Method::GET, &format!("/memories/{}", world.bob_memory), None).await.status,
        200,
        "RS256 tenant admin"
    );
}

#[tokio::test]
async fn roles_gate_writes_and_admin_routes() {
    let world = world().await;
    let server = &world.server;
    let reader = &world.acme_reader;
    assert_eq!(call(server, reader, Method::GET, &format!("/memories/{}", world.bob_memory), None).await.status, 200);
    assert_eq!(
        call(server, reader, Method::POST, "/search", Some(json!({"query": "coffee", "user_id": "bob"}))).await.status,
        200
    );
    add(server, reader, "bob", "reader writes").await.assert_error(403, "forbidden");
    call(server, reader, Method::PUT, &format!("/memories/{}", world.bob_memory), Some(json!({"text": "x"})))
        .await
        .assert_error(403, "forbidden");
    call(server, reader, Method::DELETE, &format!("/memories/{}", world.bob_memory), None)
        .await
        .assert_error(403, "forbidden");
    let read_token = As::Bearer(sign(Algorithm::HS256, &claims("acme", "bob", &["read"])));
    call(server, &read_token, Method::PUT, &format!("/memories/{}", world.bob_memory), Some(json!({"text": "x"})))
        .await
        .assert_error(403, "forbidden");
    for who in [&world.alice_writer, reader, &world.globex_writer] {
        for (method, path, body) in [
            (Method::POST, "/reset".to_owned(), None),
            (Method::DELETE, "/memories?user_id=alice".to_owned(), None),
            (Method::GET, "/entities".to_owned(), None),
            (Method::DELETE, "/entities/user/alice".to_owned(), None),
            (Method::GET, "/requests".to_owned(), None),
            (Method::GET, "/audit".to_owned(), None),
            (Method::GET, "/api-keys".to_owned(), None),
            (Method::POST, "/api-keys".to_owned(), Some(json!({"label": "escalate", "role": "admin"}))),
            (Method::GET, "/configure".to_owned(), None),
            (Method::POST, "/configure".to_owned(), Some(json!({"embedder": {"provider": "local"}}))),
            (Method::GET, "/policy".to_owned(), None),
            (Method::PUT, "/policy".to_owned(), Some(json!({"emails": "redact"}))),
            (Method::GET, "/webhooks".to_owned(), None),
            (Method::POST, "/webhooks".to_owned(), Some(json!({"url": "http://127.0.0.1:9/hook"}))),
            (Method::GET, "/export".to_owned(), None),
            (Method::POST, "/import".to_owned(), Some(json!({"type": "end", "count": 0}))),
            (Method::GET, "/usage".to_owned(), None),
            (Method::GET, "/metrics".to_owned(), None),
        ] {
            call(server, who, method, &path, body).await.assert_error(403, "forbidden");
        }
    }
    // Metrics cover every tenant: a tenant's own admin does not read them.
    call(server, &world.acme_admin, Method::GET, "/metrics", None).await.assert_error(403, "forbidden");
    // Still there after all those attempts.
    assert_eq!(
        call(server, &world.acme_admin, Method::GET, &format!("/memories/{}", world.alice_memory), None).await.status,
        200
    );
    // `Authorization: Token <key>` (what Mem0's clients send) works like X-API-Key.
    let As::Key(reader_key) = reader else { panic!("key") };
    let reply = call(server, &As::TokenScheme(reader_key.clone()), Method::GET, "/memories?user_id=bob", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn bad_bodies_with_valid_credentials() {
    let mut settings = secure_settings();
    settings.server.body_limit_bytes = 4096;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let admin = As::Key(ADMIN_KEY.to_owned());
    let big = json!({"messages": [{"role": "user", "content": "x".repeat(10_000)}], "user_id": "u", "infer": false});
    call(&server, &admin, Method::POST, "/memories", Some(big)).await.assert_error(413, "payload_too_large");
    let raw = server
        .client
        .post(format!("{}/memories", server.base))
        .header("x-api-key", ADMIN_KEY)
        .header("content-type", "application/json")
        .body("{\"messages\": [")
        .send()
        .await
        .expect("send");
    Reply::read_public(raw).await.assert_error(400, "invalid_json");
}

#[tokio::test]
async fn request_log_records_templates_per_tenant() {
    let world = world().await;
    let server = &world.server;
    let path = format!("/memories/{}", world.alice_memory);
    assert_eq!(call(server, &world.alice_writer, Method::GET, &path, None).await.status, 200);
    server.flush_request_log().await;
    let reply = call(server, &world.acme_admin, Method::GET, "/requests?limit=200", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let entries = reply.body;
    let all = entries["results"].as_array().expect("results");
    assert!(
        all.iter().any(|e| e["route"] == "/memories/{memory_id}" && e["method"] == "GET"),
        "the GET shows up in the request log: {entries}"
    );
    assert!(all.iter().all(|entry| entry["tenant"] == "acme"), "only the caller's tenant: {entries}");
    assert!(!entries.to_string().contains(&world.alice_memory), "raw ids are never logged");
    assert!(all.iter().any(|entry| entry["principal_id"].as_str().is_some_and(|id| id.starts_with("key:"))));
    call(server, &world.acme_admin, Method::GET, "/requests?limit=500", None)
        .await
        .assert_error(400, "validation_failed");
}

/// The audit trail names the credential of each read and change (a key's id, a token's
/// subject), stays within the caller's tenant, and a bound admin sees only its own entries and
/// those of the keys it manages; the request body cannot name another principal.
#[tokio::test]
async fn audit_trail_names_the_credential_and_stays_in_its_tenant() {
    let world = world().await;
    let server = &world.server;
    let alice_key_id = {
        let listed = call(server, &world.acme_admin, Method::GET, "/api-keys", None).await;
        listed.body["results"]
            .as_array()
            .expect("keys")
            .iter()
            .find(|key| key["label"] == "alice app")
            .and_then(|key| key["id"].as_str())
            .expect("alice key")
            .to_owned()
    };
    let path = format!("/memories/{}", world.alice_memory);
    assert_eq!(call(server, &world.alice_writer, Method::GET, &path, None).await.status, 200);
    let token = As::Bearer(sign(Algorithm::HS256, &claims("acme", "alice", &["read"])));
    assert_eq!(call(server, &token, Method::GET, &path, None).await.status, 200);
    // Another tenant's reader cannot see it, so nothing is recorded for it.
    call(server, &world.globex_writer, Method::GET, &path, None).await.assert_error(404, "memory_not_found");
    // A body naming another principal changes nothing.
    let forged = json!({"messages": [{"role": "user", "content": "alice naps at noon"}], "user_id": "alice",
        "infer": false, "principal_id": "admin", "source_app": "admin", "metadata": {"principal_id": "admin"}});
    let added = call(server, &world.alice_writer, Method::POST, "/memories", Some(forged)).await;
    assert_eq!(added.status, 200, "{}", added.body);
    server.flush_audit().await;

    let trail =
        call(server, &world.acme_admin, Method::GET, &format!("/audit?memory_id={}", world.alice_memory), None).await;
    assert_eq!(trail.status, 200, "{}", trail.body);
    let readers: Vec<(&str, &str)> = trail.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|entry| (entry["action"].as_str().unwrap(), entry["principal_id"].as_str().unwrap()))
        .collect();
    let alice_principal = format!("key:{alice_key_id}");
    assert_eq!(
        readers,
        [("get", "jwt:alice"), ("get", alice_principal.as_str()), ("add", alice_principal.as_str())],
        "{}",
        trail.body
    );
    let new_id = added.body["results"][0]["id"].as_str().expect("id");
    let stored = call(server, &world.alice_writer, Method::GET, &format!("/memories/{new_id}"), None).await;
    assert_eq!(stored.body["source_app"], alice_principal.as_str(), "provenance from the credential: {}", stored.body);
    let forged_trail = call(server, &world.acme_admin, Method::GET, &format!("/audit?memory_id={new_id}"), None).await;
    assert_eq!(forged_trail.body["results"][0]["principal_id"], alice_principal.as_str(), "{}", forged_trail.body);

    // Tenants: globex's entries are not acme's, and the other way round.
    let acme_all = call(server, &world.acme_admin, Method::GET, "/audit?limit=500", None).await;
    assert!(acme_all.body["results"].as_array().expect("results").iter().all(|entry| entry["tenant"] == "acme"));
    assert!(!acme_all.body.to_string().contains(&world.globex_memory), "{}", acme_all.body);
    let globex_admin =
        create_key(server, &world.admin, json!({"label": "globex admin", "role": "admin", "tenant": "globex"})).await.0;
    let globex_view = call(server, &As::Key(globex_admin), Method::GET, "/audit?limit=500", None).await;
    assert_eq!(globex_view.status, 200, "{}", globex_view.body);
    assert!(!globex_view.body.to_string().contains(&world.alice_memory), "{}", globex_view.body);
    assert!(globex_view.body.to_string().contains(&world.globex_memory), "{}", globex_view.body);

    // A bound admin: its own entries and those of keys within its grant, even when it names
    // someone else's principal.
    let (scoped, scoped_id) =
        create_key(server, &world.acme_admin, json!({"label": "alice admin", "role": "admin", "user_ids": ["alice"]}))
            .await;
    let scoped = As::Key(scoped);
    assert_eq!(call(server, &scoped, Method::GET, &path, None).await.status, 200);
    server.flush_audit().await;
    let seen = call(server, &scoped, Method::GET, "/audit?limit=500", None).await;
    assert_eq!(seen.status, 200, "{}", seen.body);
    let principals: std::collections::HashSet<&str> = seen.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|entry| entry["principal_id"].as_str())
        .collect();
    assert!(principals.contains(format!("key:{scoped_id}").as_str()), "{principals:?}");
    assert!(!principals.contains("jwt:alice"), "{principals:?}");
    let named = call(server, &scoped, Method::GET, "/audit?principal_id=jwt:alice", None).await;
    assert_eq!(named.status, 200, "{}", named.body);
    assert_eq!(named.body["results"], json!([]), "not within its grant");
}

#[tokio::test]
async fn rate_limits_answer_429_with_retry_after() {
    let mut settings = secure_settings();
    settings.rate_limit.read_per_minute = 3;
    settings.rate_limit.open_per_minute = 2;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let admin = As::Key(ADMIN_KEY.to_owned());
    let (other, _) = create_key(&server, &admin, json!({"label": "other", "role": "read"})).await;
    for remaining in ["2", "1", "0"] {
        let reply = call(&server, &admin, Method::GET, "/memories?user_id=u", None).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.headers["ratelimit-limit"], "3");
        assert_eq!(reply.headers["ratelimit-remaining"], remaining);
    }
    let reply = call(&server, &admin, Method::GET, "/memories?user_id=u", None).await;
    reply.assert_error(429, "rate_limited");
    let retry_after: u64 = reply.headers["retry-after"].to_str().expect("header").parse().expect("seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(reply.headers["ratelimit-remaining"], "0");
    // Another principal has its own budget; writes have theirs.
    assert_eq!(call(&server, &As::Key(other), Method::GET, "/memories?user_id=u", None).await.status, 200);
    assert_eq!(add(&server, &admin, "u", "still allowed to write").await.status, 200);
    // Failed credentials are limited per client address.
    let bad = As::Key("m0sk_wrong".into());
    call(&server, &bad, Method::GET, "/memories?user_id=u", None).await.assert_error(401, "unauthenticated");
    call(&server, &bad, Method::GET, "/memories?user_id=u", None).await.assert_error(401, "unauthenticated");
    call(&server, &bad, Method::GET, "/memories?user_id=u", None).await.assert_error(429, "rate_limited");
    // Probing unknown routes draws on the same budget.
    call(&server, &bad, Method::GET, "/nope", None).await.assert_error(429, "rate_limited");
}

#[tokio::test]
async fn unsafe_startup_settings_are_refused() {
    let memory = || async {
        let dir = tempfile::tempdir().expect("temp");
        let store = mem0_core::store::SqliteStore::open(&dir.path().join("m.db")).await.expect("store");
        let history = mem0_core::history::HistoryStore::open(&dir.path().join("h.db")).await.expect("history");
        (
            mem0_core::Memory::new(std::sync::Arc::new(store), history, local_embedder().await).await.expect("memory"),
            dir,
        )
    };
    let mut open_to_the_network = test_settings();
    open_to_the_network.server.bind = "0.0.0.0:8000".parse().expect("address");
    let (service, _dir) = memory().await;
    let error = mem0_server::assemble_state(service, open_to_the_network.clone()).await.expect_err("refused");
    assert!(error.to_string().contains("auth.disabled"), "{error}");
    open_to_the_network.auth.allow_disabled_on_public_bind = true;
    let (service, _dir) = memory().await;
    assert!(mem0_server::assemble_state(service, open_to_the_network).await.is_ok(), "explicitly forced");

    let mut short_admin = secure_settings();
    short_admin.auth.admin_api_key = Some("short".to_owned().into());
    let (service, _dir) = memory().await;
    let error = mem0_server::assemble_state(service, short_admin).await.expect_err("short admin key");
    assert!(error.to_string().contains("ADMIN_API_KEY"), "{error}");

    let mut short_secret = secure_settings();
    short_secret.auth.jwt.hs256_secret = Some("short".to_owned().into());
    let (service, _dir) = memory().await;
    assert!(mem0_server::assemble_state(service, short_secret).await.is_err());
}

#[tokio::test]
async fn jwks_keys_are_fetched_and_unknown_kids_refused() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let provider = MockServer::start().await;
    let jwks: Value = serde_json::from_str(include_str!("../../fixtures/jwks.json")).expect("jwks fixture");
    Mock::given(method("GET"))
        .and(path("/.well-known/jwks.json"))
        .respond_with(ResponseTemplate::new(200).set_body_json(jwks))
        .mount(&provider)
        .await;
    let mut settings = test_settings();
    settings.auth.disabled = false;
    settings.auth.jwt.jwks_url = Some(format!("{}/.well-known/jwks.json", provider.uri()));
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let sign_with_kid = |kid: &str| {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(kid.to_owned());
        let key = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).expect("rsa key");
        let claims = json!({"tenant": "acme", "sub": "alice", "roles": "write", "exp": now() + 600});
        jsonwebtoken::encode(&header, &claims, &key).expect("sign")
    };
    let good = As::Bearer(sign_with_kid("test-key-1"));
    assert_eq!(add(&server, &good, "alice", "via jwks").await.status, 200);
    let unknown = As::Bearer(sign_with_kid("rotated-away"));
    add(&server, &unknown, "alice", "x").await.assert_error(401, "unauthenticated");
    // HS256 is not accepted when only a JWKS is configured.
    let hs = As::Bearer(sign(Algorithm::HS256, &json!({"tenant": "acme", "sub": "alice", "exp": now() + 600})));
    add(&server, &hs, "alice", "x").await.assert_error(401, "unauthenticated");
}

/// An admin key bound to some users manages only keys whose grant lies within its own: it cannot
/// list, revoke or watch the unrestricted admin or keys of other users.
#[tokio::test]
async fn scoped_admins_manage_only_keys_within_their_grant() {
    let world = world().await;
    let server = &world.server;
    let acme_admin = &world.acme_admin;
    let (scoped, scoped_id) =
        create_key(server, acme_admin, json!({"label": "alice admin", "role": "admin", "user_ids": ["alice"]})).await;
    let scoped = As::Key(scoped);
    let (unrestricted, unrestricted_id) =
        create_key(server, acme_admin, json!({"label": "tenant admin 2", "role": "admin"})).await;
    let (bob_key, bob_key_id) =
        create_key(server, acme_admin, json!({"label": "bob app", "role": "write", "user_ids": ["bob"]})).await;
    let (both_key, both_key_id) =
        create_key(server, acme_admin, json!({"label": "alice and bob", "role": "read", "user_ids": ["alice", "bob"]}))
            .await;
    let (alice_key, alice_key_id) =
        create_key(server, acme_admin, json!({"label": "alice reader", "role": "read", "user_ids": ["alice"]})).await;

    let listed = call(server, &scoped, Method::GET, "/api-keys", None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let ids: Vec<&str> =
        listed.body["results"].as_array().expect("results").iter().filter_map(|key| key["id"].as_str()).collect();
    assert!(ids.contains(&alice_key_id.as_str()) && ids.contains(&scoped_id.as_str()), "{ids:?}");
    for hidden in [&unrestricted_id, &bob_key_id, &both_key_id] {
        assert!(!ids.contains(&hidden.as_str()), "{hidden} must not be listed: {ids:?}");
    }

    for outside in [&unrestricted_id, &bob_key_id, &both_key_id] {
        call(server, &scoped, Method::DELETE, &format!("/api-keys/{outside}"), None)
            .await
            .assert_error(404, "api_key_not_found");
    }
    for (key, label) in [(&unrestricted, "unrestricted admin"), (&bob_key, "bob key"), (&both_key, "two-user key")] {
        let reply = call(server, &As::Key(key.clone()), Method::GET, "/memories?user_id=bob", None).await;
        assert_eq!(reply.status, 200, "{label} still works: {}", reply.body);
    }
    assert_eq!(call(server, &scoped, Method::DELETE, &format!("/api-keys/{alice_key_id}"), None).await.status, 200);
    let reply = call(server, &As::Key(alice_key), Method::GET, "/memories?user_id=alice", None).await;
    reply.assert_error(401, "unauthenticated");

    // The request log: its own requests and those of keys within its grant, nobody else's.
    assert_eq!(call(server, &As::Key(bob_key), Method::GET, "/memories?user_id=bob", None).await.status, 200);
    assert_eq!(call(server, &world.alice_writer, Method::GET, "/memories?user_id=alice", None).await.status, 200);
    server.flush_request_log().await;
    let log = call(server, &scoped, Method::GET, "/requests?limit=200", None).await;
    assert_eq!(log.status, 200, "{}", log.body);
    let principals: std::collections::HashSet<&str> = log.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|entry| entry["principal_id"].as_str())
        .collect();
    assert!(principals.contains(format!("key:{scoped_id}").as_str()), "{principals:?}");
    for hidden in [&unrestricted_id, &bob_key_id, &both_key_id] {
        assert!(!principals.contains(format!("key:{hidden}").as_str()), "{principals:?}");
    }
    assert!(principals.iter().all(|principal| principal.starts_with("key:")), "{principals:?}");
    // The unrestricted admin still sees everything of its tenant.
    let full = call(server, acme_admin, Method::GET, "/requests?limit=200", None).await;
    assert!(full.body.to_string().contains(&format!("key:{bob_key_id}")), "{}", full.body);
}

/// Local development (authentication disabled) has one implicit caller and nobody to protect
/// from: a bulk import is not throttled, whatever the budgets say.
#[tokio::test]
async fn local_development_is_not_rate_limited() {
    let mut settings = test_settings();
    assert!(settings.auth.disabled, "the default is local development");
    settings.rate_limit.write_per_minute = 2;
    settings.rate_limit.read_per_minute = 2;
    settings.rate_limit.open_per_minute = 2;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    for index in 0..6 {
        let reply = add(&server, &As::Nobody, "importer", &format!("imported line {index}")).await;
        assert_eq!(reply.status, 200, "write {index}: {}", reply.body);
        assert!(!reply.headers.contains_key("ratelimit-limit"), "no budget is announced");
        assert_eq!(call(&server, &As::Nobody, Method::GET, "/health", None).await.status, 200);
        assert_eq!(call(&server, &As::Nobody, Method::GET, "/memories?user_id=importer", None).await.status, 200);
    }
}

/// Local development (authentication disabled) answers only loopback host names, so a page on a
/// rebound DNS name cannot read memories, and refuses cross-site writes, so a page cannot wipe
/// them with a form or `fetch`.
#[tokio::test]
async fn local_development_refuses_rebound_hosts_and_cross_site_writes() {
    let server = TestServer::start().await;
    server.add_texts("u", &["a secret worth stealing"], json!({})).await;
    let port = server.base.rsplit(':').next().expect("port").to_owned();
    let send = |method: Method, path: &str, headers: &[(&str, String)]| {
        let mut request = server.client.request(method, format!("{}{path}", server.base));
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        async move { Reply::read_public(request.send().await.expect("send")).await }
    };
    let rebound = [("host", format!("rebind.attacker.example:{port}"))];
    send(Method::GET, "/memories?user_id=u", &rebound).await.assert_error(403, "host_not_allowed");
    send(Method::POST, "/search", &rebound).await.assert_error(403, "host_not_allowed");
    for attack in [
        vec![("origin", "https://attacker.example".to_owned())],
        vec![("origin", "null".to_owned())],
        vec![("sec-fetch-site", "cross-site".to_owned())],
        vec![("content-type", "application/x-www-form-urlencoded".to_owned())],
        vec![("content-type", "text/plain".to_owned())],
    ] {
        send(Method::POST, "/reset?scope=global", &attack).await.assert_error(403, "cross_site_request");
        send(Method::DELETE, "/memories?user_id=u", &attack).await.assert_error(403, "cross_site_request");
    }
    assert_eq!(server.list_texts("user_id=u").await, ["a secret worth stealing"], "nothing was wiped");
    // Reads from the docs page, same-origin writes, curl and SDKs keep working.
    let same_origin = [("origin", server.base.clone()), ("sec-fetch-site", "same-origin".to_owned())];
    assert_eq!(send(Method::GET, "/docs", &[]).await.status, 200);
    assert_eq!(send(Method::GET, "/memories?user_id=u", &[("host", format!("localhost:{port}"))]).await.status, 200);
    let reply = server
        .client
        .post(format!("{}/memories", server.base))
        .header("origin", &server.base)
        .header("sec-fetch-site", "same-origin")
        .json(&json!({"messages": [{"role": "user", "content": "from the docs page"}], "user_id": "u", "infer": false}))
        .send()
        .await
        .expect("send");
    assert_eq!(reply.status(), 200);
    assert_eq!(send(Method::POST, "/reset", &same_origin).await.status, 200, "same-origin reset works");
}

/// Slow request bodies neither hold concurrency slots nor starve anybody: `/health`, `/ready` and
/// other routes keep answering while many connections trickle their bodies, and each slow body
/// gets 408 once `server.body_read_timeout_secs` has passed.
#[tokio::test]
async fn slow_bodies_cannot_starve_the_server() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut settings = test_settings();
    settings.server.concurrency_limit = 4;
    settings.server.body_read_timeout_secs = 2;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
        let head = format!(
            "POST /memories HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{{\"messages\": ["
        );
        stream.write_all(head.as_bytes()).await.expect("send head");
        slow.push(stream);
    }
    // Every slow body is now being waited for; the server must still answer at once.
    let quick = std::time::Duration::from_secs(1);
    for path in ["/health", "/ready", "/memories?user_id=u"] {
        let reply = tokio::time::timeout(quick, server.get(path)).await.unwrap_or_else(|_| panic!("{path} starved"));
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    }
    let added = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        server.post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "not starved"}], "user_id": "u", "infer": false}),
        ),
    )
    .await
    .expect("a write with a complete body is not starved");
    assert_eq!(added.status, 200, "{}", added.body);
    // The slow senders get 408 request_body_timeout (and nothing was stored for them).
    for mut stream in slow {
        let mut response = Vec::new();
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read_to_end(&mut response)).await;
        let text = String::from_utf8_lossy(&response);
        assert!(read.is_ok(), "the slow request was answered: {text}");
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("request_body_timeout"), "{text}");
    }
    assert_eq!(server.list_texts("user_id=u").await, ["not starved"]);
}

/// The rate-limit class of a route is the group it is registered in: `/configure`, keys, the
/// request log, scope listing and scope-wide deletes share the admin budget; reads and writes have
/// their own.
#[tokio::test]
async fn admin_routes_share_the_admin_budget() {
    let mut settings = secure_settings();
    settings.rate_limit.admin_per_minute = 4;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let admin = As::Key(ADMIN_KEY.to_owned());
    for (method, path) in [
        (Method::GET, "/configure"),
        (Method::GET, "/api-keys"),
        (Method::GET, "/requests"),
        (Method::DELETE, "/memories?user_id=nobody"),
    ] {
        let reply = call(&server, &admin, method.clone(), path, None).await;
        assert_eq!(reply.status, 200, "{method} {path}: {}", reply.body);
        assert_eq!(reply.headers["ratelimit-limit"], "4", "{method} {path} is an admin route");
    }
    call(&server, &admin, Method::GET, "/configure/providers", None).await.assert_error(429, "rate_limited");
    call(&server, &admin, Method::GET, "/entities", None).await.assert_error(429, "rate_limited");
    // Reads and writes are not admin routes.
    let read = call(&server, &admin, Method::GET, "/memories?user_id=u", None).await;
    assert_eq!((read.status, read.headers["ratelimit-limit"].to_str().ok()), (200, Some("1200")));
    let written = add(&server, &admin, "u", "a write").await;
    assert_eq!((written.status, written.headers["ratelimit-limit"].to_str().ok()), (200, Some("300")));
}

/// A tenant's admin sets its tenant's write policy at runtime: in effect at once for that tenant
/// only, invisible to and not settable by another tenant's admin or a bound admin, kept across a
/// restart; a bad rule is refused naming it, with nothing changed.
#[tokio::test]
async fn tenant_admins_set_their_own_write_policy() {
    let world = world().await;
    let server = &world.server;
    let rules = json!({"rules": [{"name": "codename", "terms": ["Bluebird"], "action": "reject"}]});
    let set = call(server, &world.acme_admin, Method::PUT, "/policy", Some(rules.clone())).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(set.body["tenant"], "acme");
    assert_eq!(set.body["tenant_policy"]["rules"][0]["name"], "codename", "{}", set.body);

    add(server, &world.acme_admin, "bob", "Bluebird ships in May").await.assert_error(400, "policy_rejected");
    let globex = add(server, &world.globex_writer, "alice", "Bluebird ships in May").await;
    assert_eq!(globex.status, 200, "another tenant's rule does not apply: {}", globex.body);

    // Another tenant's admin neither sees nor changes it.
    let (globex_admin, _) =
        create_key(server, &world.admin, json!({"label": "globex admin", "role": "admin", "tenant": "globex"})).await;
    let globex_admin = As::Key(globex_admin);
    let theirs = call(server, &globex_admin, Method::GET, "/policy", None).await;
    assert_eq!((theirs.status, &theirs.body["tenant_policy"]), (200, &json!({"rules": []})), "{}", theirs.body);
    for path in ["/policy?tenant=acme"] {
        call(server, &globex_admin, Method::GET, path, None).await.assert_error(403, "forbidden");
        call(server, &globex_admin, Method::PUT, path, Some(json!({}))).await.assert_error(403, "forbidden");
    }
    let configuration = call(server, &globex_admin, Method::GET, "/configure", None).await;
    assert_eq!(configuration.body["policy"]["tenants"], json!({}), "{}", configuration.body);
    // An admin bound to some users cannot set the whole tenant's policy.
    let (bound, _) =
        create_key(server, &world.acme_admin, json!({"label": "bob's admin", "role": "admin", "user_ids": ["bob"]}))
            .await;
    call(server, &As::Key(bound), Method::PUT, "/policy", Some(json!({}))).await.assert_error(403, "forbidden");
    // The global admin reads any tenant's.
    let acme = call(server, &world.admin, Method::GET, "/policy?tenant=acme", None).await;
    assert_eq!(acme.body["tenant_policy"], set.body["tenant_policy"], "{}", acme.body);

    // A rule that cannot compile is refused, naming it; the running policy stays.
    let bad = call(
        server,
        &world.acme_admin,
        Method::PUT,
        "/policy",
        Some(json!({"rules": [{"name": "broken", "pattern": "([a-z", "action": "redact"}]})),
    )
    .await;
    let message = bad.assert_error(400, "configuration_rejected");
    assert!(message.contains("acme") && message.contains("rules[0]"), "{message}");
    add(server, &world.acme_admin, "bob", "Bluebird again").await.assert_error(400, "policy_rejected");
    let unknown = call(server, &world.acme_admin, Method::PUT, "/policy", Some(json!({"rulez": []}))).await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);

    // Kept across a restart.
    let mut settings = server.restart_settings();
    mem0_server::configure::apply_persisted(&mut settings).await.expect("apply");
    assert_eq!(settings.memory.policy.tenants["acme"].rules[0].name, "codename", "{:?}", settings.memory.policy);
    // An empty policy removes the tenant's rules.
    let cleared = call(server, &world.acme_admin, Method::PUT, "/policy", Some(json!({}))).await;
    assert_eq!(cleared.status, 200, "{}", cleared.body);
    assert_eq!(add(server, &world.acme_admin, "bob", "Bluebird ships in May").await.status, 200);
}

/// Webhooks receive every event of their tenant: only an admin of the whole tenant manages them,
/// another tenant's admin neither sees nor touches them, and their secret is shown once.
#[tokio::test]
async fn webhooks_belong_to_their_tenant() {
    let world = world().await;
    let server = &world.server;
    let created =
        call(server, &world.acme_admin, Method::POST, "/webhooks", Some(json!({"url": "http://127.0.0.1:9/hook"})))
            .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["tenant"], "acme");
    assert!(created.body["secret"].as_str().is_some_and(|secret| secret.starts_with("whsec_")), "{}", created.body);
    let id = created.body["id"].as_str().expect("id").to_owned();
    let listed = call(server, &world.acme_admin, Method::GET, "/webhooks", None).await;
    assert_eq!(listed.body["results"].as_array().map(Vec::len), Some(1), "{}", listed.body);
    assert!(listed.body["results"][0].get("secret").is_none(), "the secret is shown once: {}", listed.body);

    let (globex_admin, _) =
        create_key(server, &world.admin, json!({"label": "globex admin", "role": "admin", "tenant": "globex"})).await;
    let globex_admin = As::Key(globex_admin);
    assert_eq!(call(server, &globex_admin, Method::GET, "/webhooks", None).await.body["results"], json!([]));
    for (method, body) in
        [(Method::GET, None), (Method::PATCH, Some(json!({"enabled": false}))), (Method::DELETE, None)]
    {
        call(server, &globex_admin, method, &format!("/webhooks/{id}"), body)
            .await
            .assert_error(404, "webhook_not_found");
    }
    call(server, &globex_admin, Method::GET, "/webhooks?tenant=acme", None).await.assert_error(403, "forbidden");
    let (bound, _) =
        create_key(server, &world.acme_admin, json!({"label": "bob's admin", "role": "admin", "user_ids": ["bob"]}))
            .await;
    let bound = As::Key(bound);
    call(server, &bound, Method::GET, "/webhooks", None).await.assert_error(403, "forbidden");
    call(server, &bound, Method::POST, "/webhooks", Some(json!({"url": "http://127.0.0.1:9/x"})))
        .await
        .assert_error(403, "forbidden");
    // The global admin reaches any tenant's.
    let theirs = call(server, &world.admin, Method::GET, &format!("/webhooks/{id}?tenant=acme"), None).await;
    assert_eq!((theirs.status, &theirs.body["id"]), (200, &json!(id)), "{}", theirs.body);
    let deleted = call(server, &world.acme_admin, Method::DELETE, &format!("/webhooks/{id}"), None).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
}

/// Exports and imports stay in their tenant: a key bound to a user exports only that user, an
/// import needs an admin and stores only within the importer's reach, and another tenant cannot
/// take over ids that exist.
#[tokio::test]
async fn exports_and_imports_stay_in_their_tenant() {
    let world = world().await;
    let server = &world.server;
    let export = |who: As, query: &'static str| {
        let request = server.client.get(format!("{}/export?{query}", server.base));
        let request = match who {
            As::Key(key) => request.header("x-api-key", key),
            _ => request,
        };
        async move {
            let response = request.send().await.expect("send");
            let status = response.status().as_u16();
            let text = response.text().await.expect("body");
            (status, text)
        }
    };
    let (status, alice_file) = export(world.alice_writer.clone(), "user_id=alice").await;
    assert_eq!(status, 200, "{alice_file}");
    assert!(alice_file.contains("alice likes oolong tea") && !alice_file.contains("matcha"), "{alice_file}");
    for query in ["user_id=bob", ""] {
        let (status, body) = export(world.alice_writer.clone(), query).await;
        assert_eq!(status, 403, "{query}: {body}");
    }
    let (status, whole) = export(world.acme_admin.clone(), "").await;
    assert_eq!(status, 200, "{whole}");
    assert!(whole.contains("bob likes espresso") && !whole.contains("matcha"), "only acme's: {whole}");
    let (status, body) = export(world.acme_admin.clone(), "tenant=globex").await;
    assert_eq!(status, 403, "{body}");
    let (status, globex) = export(world.admin.clone(), "tenant=globex").await;
    assert!(status == 200 && globex.contains("matcha"), "the global admin reaches any tenant: {globex}");

    let send = |who: &As, file: &str| {
        let As::Key(key) = who else { panic!("key") };
        server
            .client
            .post(format!("{}/import", server.base))
            .header("x-api-key", key)
            .header("content-type", "application/x-ndjson")
            .body(file.to_owned())
            .send()
    };
    let reply = Reply::read_public(send(&world.alice_writer, &alice_file).await.expect("send")).await;
    reply.assert_error(403, "forbidden");
    // An admin bound to bob: alice's lines are refused, one by one.
    let (bound, _) =
        create_key(server, &world.acme_admin, json!({"label": "bob admin", "role": "admin", "user_ids": ["bob"]}))
            .await;
    let reply = Reply::read_public(send(&As::Key(bound), &whole).await.expect("send")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["existing"], 1, "bob's memory is there: {}", reply.body);
    assert_eq!(reply.body["errors"][0]["code"], "forbidden", "{}", reply.body);
    // Another tenant cannot store memories under ids acme has.
    let (globex_admin, _) =
        create_key(server, &world.admin, json!({"label": "globex admin", "role": "admin", "tenant": "globex"})).await;
    let reply = Reply::read_public(send(&As::Key(globex_admin), &whole).await.expect("send")).await;
    assert_eq!((reply.body["imported"].clone(), reply.body["failed"].clone()), (json!(0), json!(2)), "{}", reply.body);
    assert_eq!(reply.body["errors"][0]["code"], "conflict", "{}", reply.body);
    let acme = call(server, &world.acme_admin, Method::GET, &format!("/memories/{}", world.alice_memory), None).await;
    assert_eq!(acme.body["memory"], "alice likes oolong tea", "{}", acme.body);
}
