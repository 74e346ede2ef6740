//! Test harness: starts the real server on 127.0.0.1 (port 0) with real SQLite stores in a
//! temporary directory and the real local embedder (shared by all tests of a binary), or an
//! OpenAI-compatible embedder pointed at a wiremock fake.

use std::path::PathBuf;
use std::sync::Arc;

use mem0_core::history::HistoryStore;
use mem0_core::providers::embedder::{Embedder, LocalEmbedder};
use mem0_core::store::{PgVectorConfig, PgVectorStore, SqliteStore, VectorStore};
use mem0_core::Memory;
use mem0_server::config::Settings;
use serde_json::Value;
use tokio::sync::OnceCell;

/// Directory of the local model, fetched by `scripts/fetch-model.sh`.
pub fn model_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/all-MiniLM-L6-v2"))
}

static LOCAL_EMBEDDER: OnceCell<Arc<LocalEmbedder>> = OnceCell::const_new();

/// Returns the local embedder, loaded once per test binary.
///
/// # Panics
/// When the model is missing (run `scripts/fetch-model.sh`).
pub async fn local_embedder() -> Arc<dyn Embedder> {
    let embedder = LOCAL_EMBEDDER.get_or_init(load_local_embedder).await;
    Arc::clone(embedder) as Arc<dyn Embedder>
}

async fn load_local_embedder() -> Arc<LocalEmbedder> {
    let dir = model_dir();
    let loaded = tokio::task::spawn_blocking(move || LocalEmbedder::load(&dir))
        .await
        .expect("model loading task")
        .unwrap_or_else(|error| panic!("{error} (run scripts/fetch-model.sh)"));
    Arc::new(loaded)
}

/// A local embedder of its own (not shared with the other tests of the binary): for a test
/// whose load would otherwise queue the others' embeddings behind its own.
///
/// # Panics
/// When the model is missing (run `scripts/fetch-model.sh`).
pub async fn own_local_embedder() -> Arc<dyn Embedder> {
    load_local_embedder().await
}

/// Default settings for tests (the built-in defaults, no environment).
pub fn test_settings() -> Settings {
    let environment = config::Environment::with_prefix("MEM0_TEST_UNUSED").source(Some(Default::default()));
    Settings::load_with_env(None, environment, |_| None).expect("default settings")
}

/// Which stores a test server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded SQLite store and the SQLite history volume in the server's temp dir.
    Sqlite,
    /// Postgres + pgvector (a fresh database in the test Postgres, `DATABASE_URL`), history in
    /// the SQLite volume.
    Pgvector,
    /// Everything in one fresh Postgres database: the pgvector store and the history
    /// (`memory.history.provider = "postgres"`), as replicas run.
    Postgres,
}

impl StoreKind {
    /// Every set-up, for tests that must hold on each.
    pub const ALL: [StoreKind; 3] = [StoreKind::Sqlite, StoreKind::Pgvector, StoreKind::Postgres];

    /// The set-up of servers started without naming one: `MEM0_TEST_STACK=postgres` runs the
    /// suite on [`StoreKind::Postgres`] (CI runs it both ways), anything else on SQLite.
    pub fn default_for_tests() -> Self {
        match std::env::var("MEM0_TEST_STACK").as_deref() {
            Ok("postgres") => StoreKind::Postgres,
            _ => StoreKind::Sqlite,
        }
    }
}

/// An empty database in the test Postgres (`DATABASE_URL`, started by `scripts/test.sh`),
/// dropped (connections and all) when the guard goes.
#[derive(Debug)]
pub struct TestDatabase {
    /// Its URL.
    pub url: String,
    admin_url: String,
    name: String,
}

impl TestDatabase {
    /// Creates the database.
    ///
    /// # Panics
    /// When `DATABASE_URL` is unset (run `scripts/test.sh`, which starts a Postgres) or unreachable.
    pub async fn create() -> Self {
        let admin_url = std::env::var("DATABASE_URL")
            .expect("DATABASE_URL must point at a Postgres with pgvector: run scripts/test.sh, which starts one");
        let name = format!("mem0_test_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&admin_url).await.expect("connect to the test postgres");
        sqlx::query(&format!("create database {name}")).execute(&admin).await.expect("create database");
        admin.close().await;
        let (base, _) = admin_url.rsplit_once('/').expect("url with a database");
        Self { url: format!("{base}/{name}"), admin_url, name }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // The test's runtime may be shutting down: drop on a short-lived one of our own.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            runtime.block_on(async {
                if let Ok(pool) = sqlx::PgPool::connect(&admin_url).await {
                    let _ = sqlx::query(&format!("drop database if exists {name} with (force)")).execute(&pool).await;
                }
            });
        })
        .join();
    }
}

/// Points `settings` at the stores of `kind` (the Postgres database at `url`, when there is one).
fn point_settings(settings: &mut Settings, kind: StoreKind, url: Option<&str>) {
    if let Some(url) = url {
        settings.memory.vector_store.provider = mem0_core::VectorStoreProvider::Pgvector;
        settings.memory.vector_store.pgvector.url = Some(url.to_owned().into());
        if kind == StoreKind::Postgres {
            settings.memory.history.provider = mem0_core::HistoryProvider::Postgres;
        }
    }
}

/// Opens the stores of `kind`: SQLite files in `data_dir`, or the Postgres database at `url`
/// (with the history there too for [`StoreKind::Postgres`]).
async fn open_stores(
    kind: StoreKind,
    url: Option<&str>,
    data_dir: &std::path::Path,
) -> (Arc<dyn VectorStore>, HistoryStore) {
    let volume_path = data_dir.join("history.db");
    let volume = || HistoryStore::open(&volume_path);
    let Some(url) = url else {
        let store = SqliteStore::open(&data_dir.join("memories.db")).await.expect("open store");
        return (Arc::new(store), volume().await.expect("open history"));
    };
    let config = PgVectorConfig { max_connections: 4, ..PgVectorConfig::default() };
    let store = PgVectorStore::connect(url, &config).await.expect("connect to the test postgres");
    let history = if kind == StoreKind::Postgres {
        HistoryStore::in_postgres(&store)
    } else {
        volume().await.expect("open history")
    };
    (Arc::new(store), history)
}

/// The test settings with fact extraction sent to an OpenAI-compatible fake at `uri` (a wiremock
/// server's), model `fake-chat`.
pub fn settings_with_fake_llm(uri: &str) -> Settings {
    let mut settings = test_settings();
    settings.memory.llm.provider = mem0_core::providers::llm::LlmProvider::Openai;
    settings.memory.llm.openai.base_url = Some(format!("{uri}/v1"));
    settings.memory.llm.openai.model = "fake-chat".to_owned();
    settings
}

/// An OpenAI-compatible chat completion whose reply is `content` (for wiremock fakes).
pub fn chat_completion(content: &str) -> wiremock::ResponseTemplate {
    wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}
    }))
}

/// A running server and what a test needs to talk to it.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// HTTP client.
    pub client: reqwest::Client,
    /// Where the SQLite files live.
    pub data_dir: PathBuf,
    request_log: mem0_server::background_log::RequestLogWriter,
    audit: mem0_server::background_log::AuditWriter,
    reads: mem0_server::background_log::ReadWriter,
    usage: mem0_server::background_log::UsageWriter,
    /// The Postgres database of a pgvector server (dropped with the server; `None` for a
    /// replica, which uses the first server's).
    pub database: Option<TestDatabase>,
    /// Which stores it runs on.
    pub kind: StoreKind,
    /// `http://127.0.0.1:PORT` of the credential-free `/metrics` listener, when the settings
    /// have `metrics.listen` (its address is replaced by a free port).
    pub metrics_base: Option<String>,
    _dir: tempfile::TempDir,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl TestServer {
    /// Starts a server with the local embedder and default settings.
    pub async fn start() -> Self {
        Self::start_with(test_settings(), local_embedder().await).await
    }

    /// Starts a server with `settings` (store paths are replaced by a temp dir; the LLM is built
    /// from `settings.memory.llm`) and `embedder`, on [`StoreKind::default_for_tests`].
    pub async fn start_with(settings: Settings, embedder: Arc<dyn Embedder>) -> Self {
        Self::start_on(StoreKind::default_for_tests(), settings, embedder).await
    }

    /// Like [`TestServer::start_with`], on the given vector store (pgvector: a fresh database in
    /// the test Postgres).
    pub async fn start_on(kind: StoreKind, settings: Settings, embedder: Arc<dyn Embedder>) -> Self {
        let database = match kind {
            StoreKind::Sqlite => None,
            StoreKind::Pgvector | StoreKind::Postgres => Some(TestDatabase::create().await),
        };
        let url = database.as_ref().map(|database| database.url.clone());
        let mut server = Self::start_in(kind, url, settings, embedder).await;
        server.database = database;
        server
    }

    /// A second replica of this server (which must run on [`StoreKind::Postgres`]): its own
    /// process state (pools, caches, rate limits, runtime configuration), the same database.
    pub async fn start_replica(&self, settings: Settings, embedder: Arc<dyn Embedder>) -> Self {
        assert_eq!(self.kind, StoreKind::Postgres, "replicas share everything through Postgres");
        let url = self.database.as_ref().map(|database| database.url.clone());
        Self::start_in(StoreKind::Postgres, url, settings, embedder).await
    }

    /// Stops this server (as SIGTERM does) and starts it again on the same stores with
    /// `settings`, as a restart would.
    pub async fn restarted(mut self, settings: Settings, embedder: Arc<dyn Embedder>) -> Self {
        let served = self.begin_shutdown();
        tokio::time::timeout(std::time::Duration::from_secs(30), served).await.expect("stopped").expect("task");
        let dir = std::mem::replace(&mut self._dir, tempfile::tempdir().expect("temp dir"));
        let database = self.database.take();
        let url = database.as_ref().map(|database| database.url.clone());
        let mut next = Self::start_in_dir(self.kind, url, settings, embedder, dir).await;
        next.database = database;
        next
    }

    async fn start_in(
        kind: StoreKind,
        database_url: Option<String>,
        settings: Settings,
        embedder: Arc<dyn Embedder>,
    ) -> Self {
        Self::start_in_dir(kind, database_url, settings, embedder, tempfile::tempdir().expect("temp dir")).await
    }

    async fn start_in_dir(
        kind: StoreKind,
        database_url: Option<String>,
        mut settings: Settings,
        embedder: Arc<dyn Embedder>,
        dir: tempfile::TempDir,
    ) -> Self {
        let data_dir = dir.path().to_path_buf();
        settings.configure.state_path = data_dir.join("runtime-config.json");
        point_settings(&mut settings, kind, database_url.as_deref());
        let (store, history) = open_stores(kind, database_url.as_deref(), &data_dir).await;
        // The composition root of the server, with this test's stores and embedder.
        let memory = Memory::assemble(store, history, embedder, &settings.memory).await.expect("memory service");
        let state = mem0_server::assemble_state(memory, settings).await.expect("server state");
        let request_log = state.request_log.clone();
        let audit = state.audit.clone();
        let reads = state.reads.clone();
        let usage = state.usage.clone();
        let metrics_base = if state.settings.metrics.listen.is_some() {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind metrics");
            let base = format!("http://{}", listener.local_addr().expect("address"));
            tokio::spawn(mem0_server::metrics::serve_open(listener, state.clone()));
            Some(base)
        } else {
            None
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(async move {
            let _ = mem0_server::serve(listener, state, async {
                let _ = stopped.await;
            })
            .await;
        });
        Self {
            base,
            client: reqwest::Client::new(),
            data_dir,
            request_log,
            audit,
            reads,
            usage,
            database: None,
            kind,
            metrics_base,
            _dir: dir,
            shutdown: Some(shutdown),
            served: Some(served),
        }
    }

    /// The default test settings pointed at this server's stores, as a restart would load them
    /// (before the persisted runtime configuration is applied).
    pub fn restart_settings(&self) -> Settings {
        let mut settings = test_settings();
        settings.configure.state_path = self.data_dir.join("runtime-config.json");
        point_settings(&mut settings, self.kind, self.database.as_ref().map(|database| database.url.as_str()));
        settings
    }

    /// Runs SQL on this server's history database, as an operator (or a failing disk) would:
    /// `sqlite` on the history volume, or `postgres` when the history is in Postgres. Returns the
    /// first column of the first row returned, as text, if any.
    pub async fn history_sql(&self, sqlite: &str, postgres: &str) -> Option<String> {
        use sqlx::Row as _;
        match (&self.database, self.kind) {
            (Some(database), StoreKind::Postgres) => {
                let pool = sqlx::PgPool::connect(&database.url).await.expect("connect to the history database");
                let rows = sqlx::raw_sql(postgres).fetch_all(&pool).await.expect("history sql");
                pool.close().await;
                rows.first().map(|row| row.try_get_unchecked::<String, _>(0).expect("text column"))
            }
            _ => {
                let url = format!("sqlite://{}", self.data_dir.join("history.db").display());
                let pool = sqlx::SqlitePool::connect(&url).await.expect("open the history volume");
                let rows = sqlx::raw_sql(sqlite).fetch_all(&pool).await.expect("history sql");
                pool.close().await;
                rows.first().map(|row| row.try_get_unchecked::<String, _>(0).expect("text column"))
            }
        }
    }

    /// The memory service on this server's stores, opened anew (as a restart would, journal
    /// delivered), e.g. to check what a stopped server left behind.
    pub async fn reopen(&self) -> Memory {
        let url = self.database.as_ref().map(|database| database.url.as_str());
        let (store, history) = open_stores(self.kind, url, &self.data_dir).await;
        let memory = Memory::new(store, history, local_embedder().await).await.expect("memory service");
        memory.recover(std::time::Duration::ZERO).await.expect("recover");
        memory
    }

    /// Opens the server's history (and audit trail, request log) afresh, as a restarted server
    /// would.
    pub async fn reopen_history(&self) -> mem0_core::history::HistoryStore {
        let url = self.database.as_ref().map(|database| database.url.as_str());
        open_stores(self.kind, url, &self.data_dir).await.1
    }

    /// Sends the shutdown signal (what SIGTERM does) and returns the serving task, which ends
    /// once the server has stopped.
    pub fn begin_shutdown(&mut self) -> tokio::task::JoinHandle<()> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.served.take().expect("the server was not shut down before")
    }

    /// Waits until the request log holds every request answered so far (it is written in the
    /// background; an entry is queued before its response is sent).
    pub async fn flush_request_log(&self) {
        self.request_log.flush().await;
    }

    /// Waits until the audit trail holds every event of the requests answered so far (written in
    /// the background; an event is queued before its response is sent).
    pub async fn flush_audit(&self) {
        self.audit.flush().await;
    }

    /// Waits until the token counters hold every LLM call of the requests answered so far.
    pub async fn flush_usage(&self) {
        self.usage.flush().await;
    }

    /// Waits until the read log holds every read of the requests answered so far.
    pub async fn flush_reads(&self) {
        self.reads.flush().await;
    }

    /// Sends a request and returns status, headers and JSON body (`Value::Null` when not JSON).
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        Reply::read(request.send().await.expect("request")).await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: Value) -> Reply {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Reply {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    /// Adds verbatim messages (`infer=false`) of `user_id` and returns the created ids.
    pub async fn add_texts(&self, user_id: &str, texts: &[&str], metadata: Value) -> Vec<String> {
        let messages: Vec<Value> =
            texts.iter().map(|text| serde_json::json!({"role": "user", "content": text})).collect();
        let reply = self
            .post(
                "/memories",
                serde_json::json!({"messages": messages, "user_id": user_id, "infer": false, "metadata": metadata}),
            )
            .await;
        assert_eq!(reply.status, 200, "add failed: {}", reply.body);
        reply.body["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|item| item["id"].as_str().expect("id").to_owned())
            .collect()
    }

    /// Returns the memory texts of a search, best first.
    pub async fn search_texts(&self, body: Value) -> Vec<String> {
        let reply = self.post("/search", body).await;
        assert_eq!(reply.status, 200, "search failed: {}", reply.body);
        texts(&reply.body["results"])
    }

    /// Returns the memory texts of a listing (first page).
    pub async fn list_texts(&self, query: &str) -> Vec<String> {
        let reply = self.get(&format!("/memories?{query}")).await;
        assert_eq!(reply.status, 200, "list failed: {}", reply.body);
        texts(&reply.body["results"])
    }
}

/// The `memory` fields of a JSON array of memories.
pub fn texts(results: &Value) -> Vec<String> {
    results
        .as_array()
        .expect("results array")
        .iter()
        .map(|item| item["memory"].as_str().expect("memory text").to_owned())
        .collect()
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    /// Parsed JSON body, or `Value::Null`.
    pub body: Value,
}

impl Reply {
    /// Reads a response sent with the raw client.
    pub async fn read_public(response: reqwest::Response) -> Self {
        Self::read(response).await
    }

    async fn read(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Self { status, headers, body }
    }

    /// Asserts an error envelope with `status` and `code`, and returns its message.
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.body);
        assert_eq!(self.body["code"], code, "unexpected code; body: {}", self.body);
        let request_id = self.body["request_id"].as_str().expect("request_id in body");
        assert_eq!(
            self.headers.get("x-request-id").and_then(|value| value.to_str().ok()),
            Some(request_id),
            "body and header carry the same request id"
        );
        self.body["message"].as_str().expect("message").to_owned()
    }
}

/// The local embedder, noting every text it embeds (to count embeddings in tests).
#[derive(Debug)]
pub struct NotingEmbedder {
    inner: Arc<dyn Embedder>,
    /// Every text embedded, in order.
    pub texts: std::sync::Mutex<Vec<String>>,
}

impl NotingEmbedder {
    /// Wraps the shared local embedder.
    pub async fn new() -> Arc<Self> {
        Arc::new(Self { inner: local_embedder().await, texts: std::sync::Mutex::default() })
    }

    /// How many times `text` was embedded.
    pub fn times(&self, text: &str) -> usize {
        self.texts.lock().expect("texts").iter().filter(|seen| *seen == text).count()
    }
}

#[async_trait::async_trait]
impl Embedder for NotingEmbedder {
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, mem0_core::error::ProviderError> {
        self.texts.lock().expect("texts").extend(texts.iter().cloned());
        self.inner.embed_batch(texts).await
    }
}
