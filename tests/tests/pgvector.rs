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

/// A TCP forwarder between the server and Postgres that a test can cut and restore, to make
/// Postgres "go down" without stopping the shared test database.
struct Outage {
    address: std::net::SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Outage {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let address = listener.local_addr().expect("address");
        let up = Arc::new(AtomicBool::new(true));
        let generation = Arc::new(AtomicU64::new(0));
        let (accept_up, accept_generation) = (Arc::clone(&up), Arc::clone(&generation));
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !accept_up.load(Ordering::SeqCst) {
                    continue; // dropped: connection refused in effect
                }
                let upstream = upstream.clone();
                let born = accept_generation.load(Ordering::SeqCst);
                let watch_generation = Arc::clone(&accept_generation);
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await else { return };
                    let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                    let cut = async {
                        while watch_generation.load(Ordering::SeqCst) == born {
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                    };
                    tokio::select! { _ = copy => {}, () = cut => {} }
                });
            }
        });
        Self { address, up, generation }
    }

    /// Refuses new connections and closes open ones (their tasks notice within 20 ms).
    async fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn postgres_outage_is_503_and_recovers_without_restart() {
    let direct = fresh_database().await;
    // postgres://user@host:port/db -> route host:port through the forwarder.
    let (scheme_user, rest) = direct.split_once('@').expect("url with user");
    let (host_port, database) = rest.split_once('/').expect("url with database");
    let outage = Outage::start(host_port.to_owned()).await;
    let through_proxy = format!("{scheme_user}@{}/{database}", outage.address);

    let dir = tempfile::tempdir().expect("temp");
    let mut settings = test_settings();
    settings.memory.vector_store.provider = mem0_core::VectorStoreProvider::Pgvector;
    settings.memory.vector_store.pgvector.url = Some(through_proxy.into());
    settings.memory.vector_store.pgvector.acquire_timeout_secs = 1;
    settings.memory.history.path = dir.path().join("history.db");
    settings.memory.embedder.local.model_dir = mem0_http_tests::model_dir();
    settings.configure.state_path = dir.path().join("runtime-config.json");
    let state = mem0_server::build_state(settings).await.expect("start");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(mem0_server::serve(listener, state, std::future::pending()));
    let client = reqwest::Client::new();
    let add = || {
        client
            .post(format!("{base}/memories"))
            .json(&json!({"messages": [{"role": "user", "content": "outage test"}], "user_id": "u", "infer": false}))
            .send()
    };
    assert_eq!(add().await.expect("add").status(), 200);

    outage.cut().await;
    let ready = client.get(format!("{base}/ready")).send().await.expect("ready");
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.expect("json");
    assert_eq!(body["code"], "store_unavailable");
    let failed = add().await.expect("add");
    assert_eq!(failed.status(), 503);
    assert!(failed.headers().contains_key("retry-after"));

    outage.restore();
    let mut recovered = false;
    for _ in 0..50 {
        if client.get(format!("{base}/ready")).send().await.expect("ready").status() == 200 {
            recovered = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(recovered, "ready again once postgres is back, without a restart");
    assert_eq!(add().await.expect("add").status(), 200);
    let listed: Value =
        client.get(format!("{base}/memories?user_id=u")).send().await.expect("list").json().await.expect("json");
    assert_eq!(listed["results"].as_array().map(Vec::len), Some(2), "the failed add left nothing behind: {listed}");
}
