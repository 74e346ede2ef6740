//! Benchmark of search as a user's history grows: one user with 100, 1,000 and 10,000 memories,
//! dense and hybrid search at 1, 4 and 16 concurrent callers, on SQLite and (when `DATABASE_URL`
//! is set) Postgres + pgvector; for pgvector also the raw KNN statement on the same table as the
//! floor. Reports req/s, p50/p99 and the CPU each search costs: this process (from
//! `/proc/self/stat`) plus, for Postgres, every `postgres` process on the machine (so run it on
//! a Postgres that nothing else uses, e.g. `eval "$(scripts/pg-up.sh /tmp/pg)"`).
//!
//! The embedder is a stand-in for a remote one at zero cost (hashed bag of words, 384-d), so the
//! figures are the server's and the database's own work; the local MiniLM's cost per query is
//! measured by the `embedded` and `long_turns` benchmarks.
//!
//! At each size, first one search (on the embedded store it builds the scope's index). After the
//! searches: hybrid's throughput as a share of dense's, from alternating slices of each (the
//! machine's drift cancels out); hybrid searches from 4 clients while one writer adds to the
//! same user (each search then catches up with the writes first); four writers adding 2,000
//! one-message memories verbatim into the same scope (p50/p99/max per add, and the size of the
//! SQLite write-ahead logs after); the process's resident memory.
//!
//! Run: `cargo bench -p mem0-core --bench search_scale` (env `BENCH_SCALES`, default
//! `100,1000,10000`; `BENCH_STORES`, default `sqlite,pgvector`; `BENCH_REQUESTS` per cell,
//! default 400, more while a cell has lasted less than `BENCH_MIN_SECONDS`, default 1;
//! `BENCH_FACT_CHARS`, facts of at least that length; `BENCH_PG_EMBEDDING_STORAGE=
//! external`, pgvector's default column layout instead of the migrations';
//! `BENCH_PG_INDEX_MAX_MEMORIES=0 BENCH_PG_RECORD_CACHE_ENTRIES=0`, Postgres without the
//! in-process scope indexes and row cache: every search in SQL, as before [L]).

mod common;

use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mem0_core::error::ProviderError;
use mem0_core::history::HistoryStore;
use mem0_core::memory::SearchMode;
use mem0_core::providers::embedder::Embedder;
use mem0_core::store::{PgVectorConfig, PgVectorStore, SqliteStore, VectorIndex, VectorStore};
use mem0_core::{AddRequest, Caller, Memory, Message, Scope};
use uuid::Uuid;

const DIM: usize = 384;
/// Messages per verbatim add while loading.
const LOAD_BATCH: usize = 50;

const PEOPLE: &[&str] = &["Maria", "Tom", "Aiko", "Priya", "Lars", "Fatima", "Jonas", "Chloe", "Omar", "Yuki"];
const PLACES: &[&str] = &["Lisbon", "Portland", "Osaka", "Nairobi", "Valparaiso", "Edinburgh", "Bergen", "Hanoi"];
const VERBS: &[&str] = &["likes", "visited", "is learning", "works on", "cooked", "bought", "recommended", "dislikes"];
const OBJECTS: &[&str] = &[
    "sourdough bread",
    "the violin",
    "a road bike",
    "Rust programming",
    "Thai curry",
    "marathon training",
    "oil painting",
    "the jazz festival",
    "a vintage camera",
    "rock climbing",
    "Italian lessons",
    "the chess club",
];

/// Hashed bag of words: texts sharing words get close vectors, at no model cost.
#[derive(Debug)]
struct StubEmbedder;

#[async_trait]
impl Embedder for StubEmbedder {
    fn dimension(&self) -> usize {
        DIM
    }

    fn model_id(&self) -> &str {
        "stub-bag-of-words"
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut vector = vec![0.0_f32; DIM];
                for word in text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()) {
                    let mut hasher = DefaultHasher::new();
                    word.to_lowercase().hash(&mut hasher);
                    let hash = hasher.finish();
                    vector[(hash % DIM as u64) as usize] += 1.0;
                    vector[((hash >> 20) % DIM as u64) as usize] += 0.5;
                }
                vector[0] += 0.01;
                let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
                vector.into_iter().map(|v| v / norm).collect()
            })
            .collect())
    }
}

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        items[(self.0 >> 33) as usize % items.len()]
    }

    /// A generated fact; with `BENCH_FACT_CHARS` lengthened to about that many characters by
    /// further clauses, as the facts of real conversations are.
    fn fact(&mut self, index: usize) -> String {
        let mut fact = format!(
            "{} {} {} in {} (note {index})",
            self.pick(PEOPLE),
            self.pick(VERBS),
            self.pick(OBJECTS),
            self.pick(PLACES)
        );
        while fact.len() < fact_chars() {
            let clause = format!(", then {} {} with {}", self.pick(VERBS), self.pick(OBJECTS), self.pick(PEOPLE));
            fact.push_str(&clause);
        }
        fact
    }

    fn question(&mut self) -> String {
        format!("What does {} think about {} in {}?", self.pick(PEOPLE), self.pick(OBJECTS), self.pick(PLACES))
    }
}

/// `BENCH_FACT_CHARS`: the least length of a stored fact (default 0: one short clause, ~60).
fn fact_chars() -> usize {
    std::env::var("BENCH_FACT_CHARS").ok().and_then(|value| value.parse().ok()).unwrap_or(0)
}

fn own_cpu() -> f64 {
    let me = std::process::id();
    common::cpu_seconds(|pid, _| pid == me)
}

fn postgres_cpu() -> f64 {
    common::cpu_seconds(|_, name| name == "postgres")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn scope(user: &str) -> Scope {
    Scope { user_id: Some(user.to_owned()), agent_id: None, run_id: None }
}

/// A verbatim add of one user message per text.
fn verbatim(user: &str, texts: Vec<String>) -> AddRequest {
    AddRequest {
        scope: scope(user),
        messages: texts.into_iter().map(|content| Message { role: "user".to_owned(), content, name: None }).collect(),
        infer: false,
        ..AddRequest::default()
    }
}

async fn load(memory: &Memory, caller: &Caller, user: &str, count: usize, rng: &mut Rng) {
    let mut written = 0;
    while written < count {
        let batch = LOAD_BATCH.min(count - written);
        let texts = (0..batch).map(|offset| rng.fact(written + offset)).collect();
        memory.add(caller, verbatim(user, texts)).await.expect("add");
        written += batch;
    }
}

/// `BENCH_MIN_SECONDS`: the least wall time of a cell (default 1): a cell of a few hundred fast
/// searches lasts a tenth of a second, and its throughput is then mostly noise.
fn min_seconds() -> f64 {
    std::env::var("BENCH_MIN_SECONDS").ok().and_then(|value| value.parse().ok()).unwrap_or(1.0)
}

/// Runs at least `requests` operations spread over `clients` concurrent tasks, and more until
/// `least` has passed (`operation(index)` runs request number `index`); returns the sorted
/// latencies and the wall time in seconds.
async fn drive<F, Fut>(clients: usize, requests: usize, least: Duration, operation: F) -> (Vec<Duration>, f64)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (operation, next) = (operation.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if index >= requests && started.elapsed() >= least {
                        break;
                    }
                    let started = Instant::now();
                    operation(index).await;
                    latencies.push(started.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("client"));
    }
    latencies.sort();
    (latencies, started.elapsed().as_secs_f64())
}

/// Searches of one cell: `requests` spread over `clients` concurrent callers, with the CPU they
/// cost this process and (`with_postgres`) the database.
async fn search_cell<F, Fut>(label: &str, clients: usize, requests: usize, with_postgres: bool, operation: F)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let (cpu_before, pg_before) = (own_cpu(), if with_postgres { postgres_cpu() } else { 0.0 });
    // A cell of one request (the first search of a scope) stays one.
    let least = if requests > 1 { Duration::from_secs_f64(min_seconds()) } else { Duration::ZERO };
    let (latencies, wall) = drive(clients, requests, least, operation).await;
    let per_search = |seconds: f64| seconds * 1000.0 / latencies.len() as f64;
    let server = per_search(own_cpu() - cpu_before);
    let database = if with_postgres { per_search(postgres_cpu() - pg_before) } else { 0.0 };
    println!(
        "{label:<30} c={clients:<3} {:>8.0} req/s  p50 {:>8.2?}  p99 {:>8.2?}  cpu/search {:>5.2} ms ({:.2} + db {:.2})",
        latencies.len() as f64 / wall,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        server + database,
        server,
        database
    );
}

/// Dense and hybrid searches from 4 clients in alternating slices of 250 ms, 8 of each: hybrid's
/// throughput as a share of dense's. This machine's speed drifts by ±20 % between runs and
/// within one, which two cells a few seconds apart report as a change of the ratio; slices that
/// alternate see the same drift.
async fn paired_cell(label: &str, memory: &Memory, caller: &Caller, user: &str, queries: &Arc<Vec<String>>) {
    const SLICES: usize = 8;
    let mut done = [0usize; 2];
    let mut wall = [0.0f64; 2];
    let mut shares = Vec::new();
    for _ in 0..SLICES {
        let mut slice = [0.0f64; 2];
        for (at, mode) in [SearchMode::Dense, SearchMode::Hybrid].into_iter().enumerate() {
            let (memory, caller, queries, user) =
                (memory.clone(), caller.clone(), Arc::clone(queries), user.to_owned());
            let (latencies, seconds) = drive(4, 1, Duration::from_millis(250), move |index| {
                let (memory, caller) = (memory.clone(), caller.clone());
                let request = common::search_request(&user, queries[index % queries.len()].clone(), mode);
                async move {
                    memory.search(&caller, request).await.expect("search");
                }
            })
            .await;
            done[at] += latencies.len();
            wall[at] += seconds;
            slice[at] = latencies.len() as f64 / seconds;
        }
        shares.push(slice[1] / slice[0]);
    }
    shares.sort_by(f64::total_cmp);
    let (dense, hybrid) = (done[0] as f64 / wall[0], done[1] as f64 / wall[1]);
    println!(
        "{label:<30} c=4   dense {dense:>6.0} req/s, hybrid {hybrid:>6.0} req/s: {:.0} % (slices {:.0}–{:.0} %, median {:.0} %)",
        100.0 * hybrid / dense,
        100.0 * shares[0],
        100.0 * shares[SLICES - 1],
        100.0 * shares[SLICES / 2]
    );
}

/// Searches through the service.
#[allow(clippy::too_many_arguments)]
async fn run_cell(
    label: &str,
    memory: &Memory,
    caller: &Caller,
    user: &str,
    mode: SearchMode,
    clients: usize,
    requests: usize,
    queries: &Arc<Vec<String>>,
    with_postgres: bool,
) {
    let (memory, caller, queries, user) = (memory.clone(), caller.clone(), Arc::clone(queries), user.to_owned());
    search_cell(label, clients, requests, with_postgres, move |index| {
        let (memory, caller) = (memory.clone(), caller.clone());
        let request = common::search_request(&user, queries[index % queries.len()].clone(), mode);
        async move {
            let outcome = memory.search(&caller, request).await.expect("search");
            assert!(!outcome.results.is_empty(), "a search found nothing");
        }
    })
    .await;
}

/// The floor on Postgres: the plain KNN statement over the same user's rows.
async fn raw_knn(pool: &sqlx::PgPool, user: &str, clients: usize, requests: usize, queries: &[Vec<f32>]) {
    let (pool, queries, user) = (pool.clone(), Arc::new(queries.to_vec()), user.to_owned());
    search_cell("raw pgvector KNN (floor)", clients, requests, true, move |index| {
        let (pool, user) = (pool.clone(), user.clone());
        let vector = pgvector::Vector::from(queries[index % queries.len()].clone());
        async move {
            let rows: Vec<(Uuid,)> = sqlx::query_as(
                "select id from memories where tenant = 'bench' and user_id = $1 order by embedding <=> $2 limit 10",
            )
            .bind(&user)
            .bind(vector)
            .fetch_all(&pool)
            .await
            .expect("knn");
            assert!(!rows.is_empty());
        }
    })
    .await;
}

/// Verbatim adds of one short message from `clients` concurrent writers into a scope that
/// already holds many memories: the write tail (checkpoints, lock waits) shows in p99.
async fn write_cell(label: &str, memory: &Memory, caller: &Caller, user: &str, clients: usize, wal: &[PathBuf]) {
    let (memory, caller, user) = (memory.clone(), caller.clone(), user.to_owned());
    let (latencies, wall) = drive(clients, 2_000, Duration::ZERO, move |index| {
        let (memory, caller) = (memory.clone(), caller.clone());
        let request = verbatim(&user, vec![Rng(0x1234_5678 + index as u64).fact(index)]);
        async move {
            memory.add(&caller, request).await.expect("add");
        }
    })
    .await;
    let wal_mb: Vec<String> = wal
        .iter()
        .map(|path| {
            let bytes = std::fs::metadata(path).map_or(0, |meta| meta.len());
            format!("{} {:.1} MB", path.file_name().unwrap_or_default().to_string_lossy(), bytes as f64 / 1e6)
        })
        .collect();
    println!(
        "{label:<30} c={clients:<3} {:>8.0} adds/s p50 {:>8.2?}  p99 {:>8.2?}  max {:>8.2?}  {}",
        latencies.len() as f64 / wall,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1],
        wal_mb.join(", ")
    );
}

async fn bench_store(
    name: &str,
    store: Arc<dyn VectorStore>,
    history: HistoryStore,
    pool: Option<sqlx::PgPool>,
    wal: &[PathBuf],
) {
    let scales: Vec<usize> = std::env::var("BENCH_SCALES")
        .unwrap_or_else(|_| "100,1000,10000".to_owned())
        .split(',')
        .filter_map(|value| value.trim().parse().ok())
        .collect();
    let requests: usize = std::env::var("BENCH_REQUESTS").ok().and_then(|value| value.parse().ok()).unwrap_or(400);
    let memory = Memory::new(store, history, Arc::new(StubEmbedder)).await.expect("memory");
    let caller = Caller::local_admin("bench");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let queries: Arc<Vec<String>> = Arc::new((0..200).map(|_| rng.question()).collect());
    let vectors = StubEmbedder.embed_batch(&queries).await.expect("embed");
    for &count in &scales {
        let user = format!("user-{count}");
        let started = Instant::now();
        load(&memory, &caller, &user, count, &mut rng).await;
        println!("\n{name}: {count} memories for one user (loaded in {:.1?})", started.elapsed());
        if let Some(pool) = &pool {
            // Settled statistics, as a database that has been running has: otherwise autovacuum
            // works through the fresh rows during the first cells and its CPU counts as theirs.
            sqlx::query("vacuum analyze").execute(pool).await.expect("vacuum");
        }
        // The embedded store builds the scope's index on its first search (after a restart, or
        // when the scope was evicted).
        run_cell(
            &format!("{name} {count} first hybrid"),
            &memory,
            &caller,
            &user,
            SearchMode::Hybrid,
            1,
            1,
            &queries,
            false,
        )
        .await;
        for mode in [SearchMode::Dense, SearchMode::Hybrid] {
            for clients in [1, 4, 16] {
                let label = format!("{name} {count} {}", if mode == SearchMode::Dense { "dense" } else { "hybrid" });
                run_cell(&label, &memory, &caller, &user, mode, clients, requests, &queries, pool.is_some()).await;
            }
        }
        paired_cell(&format!("{name} {count} hybrid/dense"), &memory, &caller, &user, &queries).await;
        if let Some(pool) = &pool {
            for clients in [1, 4, 16] {
                raw_knn(pool, &user, clients, requests, &vectors).await;
            }
        }
        mixed_cell(
            &format!("{name} {count} hybrid + 1 writer"),
            &memory,
            &caller,
            &user,
            requests,
            &queries,
            pool.is_some(),
        )
        .await;
        write_cell(&format!("{name} {count} verbatim adds"), &memory, &caller, &user, 4, wal).await;
        println!("{name} {count} resident memory {:.0} MB", resident_mb());
    }
}

/// Hybrid searches from 4 clients while one writer adds to the same user without pause: each
/// search after a write first brings the scope's state up to date (the CPU column includes the
/// writer's work).
async fn mixed_cell(
    label: &str,
    memory: &Memory,
    caller: &Caller,
    user: &str,
    requests: usize,
    queries: &Arc<Vec<String>>,
    with_postgres: bool,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (memory, caller, user, stop) = (memory.clone(), caller.clone(), user.to_owned(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut adds = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let request = verbatim(&user, vec![Rng(0x9e37_79b9 + adds as u64).fact(adds)]);
                memory.add(&caller, request).await.expect("add");
                adds += 1;
            }
            adds
        })
    };
    let started = Instant::now();
    run_cell(label, memory, caller, user, SearchMode::Hybrid, 4, requests, queries, with_postgres).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let adds = writer.await.expect("writer");
    println!("{:<30}       {:>8.0} adds/s meanwhile", "", adds as f64 / started.elapsed().as_secs_f64());
}

/// This process's resident set (`VmRSS`), in MB.
fn resident_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmRSS:").map(|rest| rest.trim().trim_end_matches("kB").trim().to_owned())
            })
        })
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let stores = std::env::var("BENCH_STORES").unwrap_or_else(|_| "sqlite,pgvector".into());
    let dir = tempfile::tempdir().expect("temp dir");
    if stores.contains("sqlite") {
        let store = SqliteStore::open(&dir.path().join("memories.db")).await.expect("open");
        let history = HistoryStore::open(&dir.path().join("history-sqlite.db")).await.expect("history");
        let wal = [dir.path().join("memories.db-wal"), dir.path().join("history-sqlite.db-wal")];
        bench_store("sqlite", Arc::new(store), history, None, &wal).await;
    }
    if stores.contains("pgvector") {
        match std::env::var("DATABASE_URL") {
            Err(_) => println!("pgvector: skipped (set DATABASE_URL, e.g. eval \"$(scripts/pg-up.sh /tmp/pg)\")"),
            Ok(admin_url) => {
                let name = format!("mem0_bench_{}", Uuid::new_v4().simple());
                let admin = sqlx::PgPool::connect(&admin_url).await.expect("connect");
                sqlx::query(&format!("create database {name}")).execute(&admin).await.expect("create database");
                let url = format!("{}/{name}", admin_url.rsplit_once('/').expect("url").0);
                let mut config = PgVectorConfig::default();
                if let Ok(value) = std::env::var("BENCH_PG_INDEX_MAX_MEMORIES") {
                    config.index_max_memories = value.parse().expect("BENCH_PG_INDEX_MAX_MEMORIES: a number");
                }
                if let Ok(value) = std::env::var("BENCH_PG_RECORD_CACHE_ENTRIES") {
                    config.record_cache_entries = value.parse().expect("BENCH_PG_RECORD_CACHE_ENTRIES: a number");
                }
                let store = PgVectorStore::connect(&url, &config).await.expect("connect");
                let pool = store.pool().clone();
                if std::env::var("BENCH_PG_EMBEDDING_STORAGE").is_ok_and(|value| value == "external") {
                    // pgvector's default layout, for comparison (migration 0013 keeps embeddings in the row).
                    store.ensure_dimension(DIM, "bench").await.expect("dimension");
                    sqlx::query("alter table memories alter column embedding set storage external")
                        .execute(&pool)
                        .await
                        .expect("storage");
                }
                let history = HistoryStore::open(&dir.path().join("history-pg.db")).await.expect("history");
                let wal = [dir.path().join("history-pg.db-wal")];
                bench_store("pgvector", Arc::new(store), history, Some(pool), &wal).await;
                admin.close().await;
                let admin = sqlx::PgPool::connect(&admin_url).await.expect("connect");
                let _ = sqlx::query(&format!("drop database {name} with (force)")).execute(&admin).await;
            }
        }
    }
}
