//! The server on the production store: one setting (`memory.vector_store.provider = "pgvector"`)
//! switches it, and the memory API behaves as on the embedded store. Needs the test Postgres
//! (`DATABASE_URL`, started by `scripts/test.sh`).

use mem0_http_tests::{test_settings, TestDatabase};
use serde_json::{json, Value};

#[tokio::test]
async fn the_memory_api_on_pgvector() {
    let dir = tempfile::tempdir().expect("temp");
    let mut settings = test_settings();
    settings.memory.vector_store.provider = mem0_core::VectorStoreProvider::Pgvector;
    let database = TestDatabase::create().await;
    settings.memory.vector_store.pgvector.url = Some(database.url.clone().into());
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
    let database = TestDatabase::create().await;
    let url = database.url.clone();
    let store = mem0_core::store::PgVectorStore::connect(&url, &Default::default()).await.expect("connect");
    use mem0_core::store::VectorIndex as _;
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
/// Postgres "go down" without stopping the shared test database. A cut returns once every
/// forwarded connection is closed (explicit signals, no sleeping).
struct Outage {
    address: std::net::SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    generation: tokio::sync::watch::Sender<u64>,
    live: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    closed: std::sync::Arc<tokio::sync::Notify>,
}

impl Outage {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let address = listener.local_addr().expect("address");
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = tokio::sync::watch::channel(0_u64);
        let live = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(tokio::sync::Notify::new());
        let (accept_up, accept_generation) = (Arc::clone(&up), generation.clone());
        let (accept_live, accept_closed) = (Arc::clone(&live), Arc::clone(&closed));
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !accept_up.load(Ordering::SeqCst) {
                    continue; // dropped: connection refused in effect
                }
                let upstream = upstream.clone();
                let mut cut = accept_generation.subscribe();
                cut.mark_unchanged();
                accept_live.fetch_add(1, Ordering::SeqCst);
                let (live, closed) = (Arc::clone(&accept_live), Arc::clone(&accept_closed));
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                        let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                        tokio::select! { _ = copy => {}, _ = cut.changed() => {} }
                    }
                    drop(inbound);
                    live.fetch_sub(1, Ordering::SeqCst);
                    closed.notify_waiters();
                });
            }
        });
        Self { address, up, generation, live, closed }
    }

    /// Refuses new connections and closes open ones; returns when they are all closed.
    async fn cut(&self) {
        use std::sync::atomic::Ordering;
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|generation| *generation += 1);
        loop {
            let closed = self.closed.notified();
            if self.live.load(Ordering::SeqCst) == 0 {
                break;
            }
            closed.await;
        }
    }

    fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn postgres_outage_is_503_and_recovers_without_restart() {
    let database = TestDatabase::create().await;
    let direct = database.url.clone();
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
    let ready = client.get(format!("{base}/ready")).send().await.expect("ready");
    assert_eq!(ready.status(), 200, "ready again once postgres is back, without a restart");
    assert_eq!(add().await.expect("add").status(), 200);
    let listed: Value =
        client.get(format!("{base}/memories?user_id=u")).send().await.expect("list").json().await.expect("json");
    assert_eq!(listed["results"].as_array().map(Vec::len), Some(2), "the failed add left nothing behind: {listed}");
}

/// Clients that give up mid-request (hundreds of reads and writes cut off at random points) leave
/// nothing half-done on either store: no Postgres backend idle in a transaction, no "transaction
/// in progress" warnings in the server log, every later request succeeds, and every memory that
/// was written has its history.
#[tokio::test]
async fn requests_cut_off_mid_flight_leave_nothing_half_done() {
    use mem0_http_tests::{local_embedder, StoreKind, TestServer};
    let log = std::env::var("MEM0_PG_DATA").ok().map(|dir| std::path::PathBuf::from(dir).join("server.log"));
    if log.is_none() {
        eprintln!("MEM0_PG_DATA is not set (an external DATABASE_URL): the postgres log is not checked");
    }
    // Other tests share this Postgres and its log; `scripts/pg-up.sh` prefixes each line with
    // `db=<database>`, so only this test's own databases are counted.
    let mut databases = Vec::new();
    for kind in StoreKind::ALL {
        let server = TestServer::start_on(kind, test_settings(), local_embedder().await).await;
        if let Some(database) = &server.database {
            databases.push(format!("db={} ", database.name()));
        }
        server.add_texts("u", &["a memory to find", "another memory"], json!({})).await;
        let impatient = reqwest::Client::builder().build().expect("client");
        let mut cut = Vec::new();
        for index in 0..300_u64 {
            let request = if index % 2 == 0 {
                impatient.post(format!("{}/search", server.base)).json(&json!({"query": "memory", "user_id": "u"}))
            } else {
                let text = format!("written by impatient client {index}");
                impatient
                    .post(format!("{}/memories", server.base))
                    .json(&json!({"messages": [{"role": "user", "content": text}], "user_id": "u", "infer": false}))
            };
            // Give up after 0 to 29 ms: before, during and after the store work.
            let patience = std::time::Duration::from_millis(index % 30);
            cut.push(tokio::spawn(async move { tokio::time::timeout(patience, request.send()).await }));
        }
        for task in cut {
            let _ = task.await.expect("task");
        }
        // Every later request succeeds.
        for _ in 0..20 {
            assert_eq!(server.post("/search", json!({"query": "memory", "user_id": "u"})).await.status, 200);
            server.add_texts("u", &["written by a patient client"], json!({})).await;
        }
        // Writes the server finished have their history, whatever the client saw.
        let mut cursor: Option<String> = None;
        loop {
            let page = server
                .get(&format!(
                    "/memories?user_id=u&page_size=1000{}",
                    cursor.map(|c| format!("&cursor={c}")).unwrap_or_default()
                ))
                .await;
            for item in page.body["results"].as_array().expect("results") {
                let id = item["id"].as_str().expect("id");
                let history = server.get(&format!("/memories/{id}/history")).await;
                assert_eq!(history.body[0]["event"], "ADD", "{kind:?}: {id} has its ADD: {}", history.body);
            }
            match page.body["next"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        // The background logs (audit, reads, request log) write in short transactions of their
        // own, in Postgres with the Postgres history: let them finish, so the check below sees
        // only transactions a cut request left open.
        server.flush_request_log().await;
        server.flush_audit().await;
        server.flush_reads().await;
        if let Some(database) = &server.database {
            let database = database.name().to_owned();
            let admin = sqlx::PgPool::connect(&std::env::var("DATABASE_URL").expect("url")).await.expect("admin");
            let stale: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_activity where datname = $1 and state like 'idle in transaction%'",
            )
            .bind(&database)
            .fetch_one(&admin)
            .await
            .expect("activity");
            assert_eq!(stale, 0, "no backend is left inside a transaction");
        }
    }
    if let Some(text) = log.as_ref().and_then(|path| std::fs::read_to_string(path).ok()) {
        if !text.contains(" db=") {
            eprintln!("the postgres log has no `db=` line prefix (not started by scripts/pg-up.sh?): warnings cannot be attributed");
        }
        let warnings: Vec<&str> = text
            .lines()
            .filter(|line| line.contains("transaction in progress"))
            .filter(|line| databases.iter().any(|database| line.contains(database.as_str())))
            .collect();
        assert!(warnings.is_empty(), "no 'transaction in progress' warnings in the postgres log: {warnings:?}");
    }
}
