//! Store benchmark: loads N synthetic memories (clustered 384-d vectors, like real sentence
//! embeddings) into scopes of different sizes, then reports insert throughput, scoped search
//! latency p50/p95/p99 and recall@10 against exact search, for the SQLite store and (when
//! `DATABASE_URL` is set) the Postgres + pgvector store.
//!
//! Run: `BENCH_N=100000 cargo bench -p mem0-core --bench stores`
//! (`BENCH_STORES=sqlite,pgvector`; `DATABASE_URL` from `eval "$(scripts/pg-up.sh /tmp/pg)"`;
//! `BENCH_PG_IMPORT=1` loads Postgres with `PgVectorStore::import`: COPY, then one HNSW build).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{NaiveDate, Utc};
use mem0_core::scope::Scope;
use mem0_core::store::{
    PgVectorConfig, PgVectorStore, ScopedQuery, SqliteStore, VectorIndex as _, VectorStore, WriteSet,
};
use mem0_core::types::{memory_hash, MemoryRecord, Metadata, Provenance, StateInfo};
use uuid::Uuid;

const DIM: usize = 384;
const CLUSTERS: usize = 200;
const QUERIES: usize = 100;

struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }
}

fn normalise(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    vector.iter_mut().for_each(|v| *v /= norm);
    vector
}

/// A point near one of the cluster centres.
fn clustered(rng: &mut Rng, centres: &[Vec<f32>], spread: f32) -> Vec<f32> {
    let centre = &centres[rng.below(centres.len())];
    normalise(centre.iter().map(|c| c + spread * rng.uniform()).collect())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

struct Dataset {
    scopes: Vec<(String, Vec<MemoryRecord>)>,
    queries: Vec<Vec<f32>>,
}

fn dataset(n: usize) -> Dataset {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let centres: Vec<Vec<f32>> = (0..CLUSTERS).map(|_| normalise((0..DIM).map(|_| rng.uniform()).collect())).collect();
    let small = (n / 100).max(50);
    let medium = n / 5;
    let large = n.saturating_sub(small + medium);
    let now = Utc::now();
    let scopes = [("large", large), ("medium", medium), ("small", small)]
        .into_iter()
        .map(|(user, count)| {
            let records = (0..count)
                .map(|index| {
                    let text = format!("memory {index} of {user}");
                    MemoryRecord {
                        id: Uuid::now_v7(),
                        tenant: "bench".into(),
                        scope: Scope { user_id: Some(user.into()), agent_id: None, run_id: None },
                        hash: memory_hash(&text),
                        memory: text,
                        metadata: Metadata::new(),
                        created_at: now,
                        updated_at: now,
                        expiration_date: None,
                        attributed_to: None,
                        role: None,
                        actor_id: None,
                        memory_type: None,
                        linked_memory_ids: Vec::new(),
                        entities: Vec::new(),
                        text_lemmatized: String::new(),
                        embedding: clustered(&mut rng, &centres, 0.08).into(),
                        provenance: Provenance::default(),
                        state: StateInfo::default(),
                    }
                })
                .collect();
            (user.to_owned(), records)
        })
        .collect();
    let queries = (0..QUERIES).map(|_| clustered(&mut rng, &centres, 0.10)).collect();
    Dataset { scopes, queries }
}

async fn load(name: &str, store: &dyn VectorStore, data: &Dataset, postgres: Option<&sqlx::PgPool>) {
    store.ensure_dimension(DIM, "bench").await.expect("dimension");
    let total: usize = data.scopes.iter().map(|(_, records)| records.len()).sum();
    let started = Instant::now();
    for (_, records) in &data.scopes {
        for chunk in records.chunks(1000) {
            store.apply(&WriteSet::insert(chunk)).await.expect("insert");
        }
    }
    let elapsed = started.elapsed();
    println!("{name}: inserted {total} in {elapsed:.1?} ({:.0} rows/s)", total as f64 / elapsed.as_secs_f64());
    if let Some(pool) = postgres {
        // What autovacuum would do shortly after a bulk load: fresh planner statistics.
        sqlx::query("analyze memories").execute(pool).await.expect("analyze");
    }
}

async fn measure(name: &str, store: &dyn VectorStore, data: &Dataset) {
    for (user, records) in &data.scopes {
        let query = ScopedQuery {
            tenant: "bench".into(),
            scope: Scope { user_id: Some(user.clone()), agent_id: None, run_id: None },
            filter: None,
            show_expired: false,
            include_superseded: false,
            today: NaiveDate::from_ymd_opt(2026, 1, 1).expect("date"),
            fresh_since: None,
        };
        let mut timings = Vec::with_capacity(data.queries.len());
        let mut recall_sum = 0.0;
        for probe in &data.queries {
            let started = Instant::now();
            let hits = store.search(&query, probe, 10, 0.0).await.expect("search");
            timings.push(started.elapsed());
            let mut exact: Vec<(f32, Uuid)> = records.iter().map(|r| (dot(&r.embedding, probe), r.id)).collect();
            exact.sort_by(|a, b| b.0.total_cmp(&a.0));
            let truth: HashSet<Uuid> = exact.iter().take(10).map(|(_, id)| *id).collect();
            recall_sum += hits.iter().filter(|hit| truth.contains(&hit.record.id)).count() as f64 / 10.0;
        }
        timings.sort();
        println!(
            "{name}: scope {user:<6} {:>8} rows  search top-10 p50 {:>9.2?} p95 {:>9.2?} p99 {:>9.2?}  recall@10 {:.3}",
            records.len(),
            percentile(&timings, 0.50),
            percentile(&timings, 0.95),
            percentile(&timings, 0.99),
            recall_sum / data.queries.len() as f64
        );
    }
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let stores = std::env::var("BENCH_STORES").unwrap_or_else(|_| "sqlite,pgvector".into());
    let data = dataset(n);
    println!("N = {n}: scopes {:?}", data.scopes.iter().map(|(u, r)| (u.as_str(), r.len())).collect::<Vec<_>>());
    if stores.contains("sqlite") {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open_with_cache(&dir.path().join("bench.db"), n + 1).await.expect("open");
        load("sqlite", &store, &data, None).await;
        measure("sqlite", &store, &data).await;
    }
    if stores.contains("pgvector") {
        match std::env::var("DATABASE_URL") {
            Err(_) => println!("pgvector: skipped (set DATABASE_URL, e.g. eval \"$(scripts/pg-up.sh /tmp/pg)\")"),
            Ok(admin_url) => {
                let name = format!("mem0_bench_{}", Uuid::new_v4().simple());
                let admin = sqlx::PgPool::connect(&admin_url).await.expect("connect");
                sqlx::query(&format!("create database {name}")).execute(&admin).await.expect("create database");
                let url = format!("{}/{name}", admin_url.rsplit_once('/').expect("url").0);
                let store = PgVectorStore::connect(&url, &PgVectorConfig::default()).await.expect("connect");
                if std::env::var("BENCH_PG_IMPORT").is_ok() {
                    // Bulk path: COPY, then one parallel HNSW build.
                    store.ensure_dimension(DIM, "bench").await.expect("dimension");
                    let records: Vec<MemoryRecord> =
                        data.scopes.iter().flat_map(|(_, records)| records.iter().cloned()).collect();
                    let report = store.import(&records, "4GB").await.expect("import");
                    println!(
                        "pgvector: imported {} rows in {:.1?} ({:.0} rows/s), HNSW index built in {:.1?}",
                        report.rows,
                        report.load,
                        report.rows as f64 / report.load.as_secs_f64(),
                        report.index
                    );
                } else {
                    load("pgvector", &store, &data, Some(store.pool())).await;
                }
                measure("pgvector", &store, &data).await;
                // The same data with exact ranking for larger scopes, to place exact_search_max_rows.
                let wider = PgVectorConfig {
                    exact_search_max_rows: 25_000,
                    run_migrations: false,
                    ..PgVectorConfig::default()
                };
                let exact_store = PgVectorStore::connect(&url, &wider).await.expect("connect");
                measure("pgvector exact<=25k", &exact_store, &data).await;
                exact_store.pool().close().await;
                // Wider HNSW searches: more of the true top-k in large scopes, at some latency.
                let thorough = PgVectorConfig {
                    hnsw_ef_search: 400,
                    hnsw_max_scan_tuples: 100_000,
                    run_migrations: false,
                    ..PgVectorConfig::default()
                };
                let thorough_store = PgVectorStore::connect(&url, &thorough).await.expect("connect");
                measure("pgvector ef400/scan100k", &thorough_store, &data).await;
                thorough_store.pool().close().await;
                store.pool().close().await;
                let _ = sqlx::query(&format!("drop database {name} with (force)")).execute(&admin).await;
            }
        }
    }
}
