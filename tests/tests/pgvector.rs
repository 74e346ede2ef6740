//! The server on the production store: one setting (`memory.vector_store.provider = "pgvector"`)
//! switches it, and the memory API behaves as on the embedded store. Needs the test Postgres
//! (`DATABASE_URL`, started by `scripts/test.sh`).

use mem0_http_tests::test_settings;
use serde_json::{json, Value};

async fn fresh_database() -> String {
    let admin_url = std::env::var("DATABASE_URL")
        .expect("DATABASE_URL must point at a Postgres with pgvector: run scripts/test.sh, which starts one");
    let name = format!("mem0_http_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&admin_url).await.expect("connect");
    sqlx::query(&format!("create database {name}")).execute(&admin).await.expect("create database");
    let (base, _) = admin_url.rsplit_once('/').expect("url with a database");
    format!("{base}/{name}")
}

#[tokio::test]
async fn the_memory_api_on_pgvector() {
    let dir = tempfile::tempdir().expect("temp");
    let mut settings = test_settings();
    settings.memory.vector_store.provider = mem0_core::VectorStoreProvider::Pgvector;
    settings.memory.vector_store.pgvector.url = Some(fresh_database().await.into());
    settings.memory.history.path = dir.path().join("history.db");
    settings.memory.embedder.local.model_dir = mem0_http_tests::model_dir();
    settings.configure.state_path = dir.path().join("runtime-config.json");
    let state = mem0_server::build_state(settings).await.expect("start on pgvector");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(mem0_server::serve(listener, state, std::future::pending()));
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| client.post(format!("{base}{path}")).json(&body).send();

    let added: Value = post(
        "/memories",
        json!({"messages": [{"role": "user", "content": "I am allergic to peanuts"}, {"role": "user", "content": "I live in Lisbon"}],
               "user_id": "alice", "infer": false, "metadata": {"n": 3}}),
    )
    .await
    .expect("add")
    .json()
    .await
    .expect("json");
    let id = added["results"][0]["id"].as_str().expect("id").to_owned();
    let found: Value =
        post("/search", json!({"query": "what food should the user avoid?", "user_id": "alice", "top_k": 1}))
            .await
            .expect("search")
            .json()
            .await
            .expect("json");
    assert_eq!(found["results"][0]["memory"], "I am allergic to peanuts", "{found}");
    let listed: Value = client
        .get(format!("{base}/memories?user_id=alice&filters=%7B%22n%22%3A3%7D"))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(listed["results"].as_array().map(Vec::len), Some(2), "{listed}");
    let deleted = client.delete(format!("{base}/memories/{id}")).send().await.expect("delete");
    assert_eq!(deleted.status(), 200);
    let missing = client.get(format!("{base}/memories/{id}")).send().await.expect("get");
    assert_eq!(missing.status(), 404);
    let ready = client.get(format!("{base}/ready")).send().await.expect("ready");
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn a_dimension_mismatch_on_pgvector_stops_startup() {
    let url = fresh_database().await;
    let store = mem0_core::store::PgVectorStore::connect(&url, &Default::default()).await.expect("connect");
    use mem0_core::store::VectorStore as _;
    store.ensure_dimension(1536, "text-embedding-3-small").await.expect("first embedder");
    let dir = tempfile::tempdir().expect("temp");
    let mut settings = test_settings();
    settings.memory.vector_store.provider = mem0_core::VectorStoreProvider::Pgvector;
    settings.memory.vector_store.pgvector.url = Some(url.into());
    settings.memory.history.path = dir.path().join("history.db");
    settings.memory.embedder.local.model_dir = mem0_http_tests::model_dir();
    let error = mem0_server::build_state(settings).await.expect_err("384 on a 1536 table");
    let message = format!("{error:#}");
    assert!(message.contains("1536") && message.contains("384"), "{message}");
}
