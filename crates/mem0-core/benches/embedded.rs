//! Benchmark of the embedded default: local embedder latency, SQLite store insert throughput and
//! scoped search latency at N memories in one scope (plus other scopes beside it).
//!
//! Run: `cargo bench -p mem0-core --bench embedded` (env `BENCH_N`, default 10000;
//! `BENCH_MODEL_DIR`, default models/all-MiniLM-L6-v2).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{NaiveDate, Utc};
use mem0_core::providers::embedder::{Embedder, LocalEmbedder, Precision, DEFAULT_MAX_WINDOWS};
use mem0_core::scope::Scope;
use mem0_core::store::{MemoryRows as _, ScopedQuery, SqliteStore, VectorIndex as _, WriteSet};
use mem0_core::types::{memory_hash, MemoryRecord, Metadata, Provenance, StateInfo};
use uuid::Uuid;

const DIM: usize = 384;

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }

    fn unit_vector(&mut self) -> Vec<f32> {
        let vector: Vec<f32> = (0..DIM).map(|_| self.next_f32()).collect();
        let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
        vector.into_iter().map(|v| v / norm).collect()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name:<44} p50 {:>9.2?}  p95 {:>9.2?}  p99 {:>9.2?}  (n={})",
        percentile(&samples, 0.50),
        percentile(&samples, 0.95),
        percentile(&samples, 0.99),
        samples.len()
    );
}

fn memory(tenant: &str, user: &str, index: usize, embedding: Vec<f32>) -> MemoryRecord {
    let text = format!("synthetic memory number {index} of {user}");
    let now = Utc::now();
    MemoryRecord {
        id: Uuid::now_v7(),
        tenant: tenant.to_owned(),
        scope: Scope { user_id: Some(user.to_owned()), agent_id: None, run_id: None },
        hash: memory_hash(&text),
        memory: text,
        metadata: Metadata::new(),
        created_at: now,
        updated_at: now,
        expiration_date: None,
        attributed_to: None,
        role: Some("user".to_owned()),
        actor_id: None,
        memory_type: None,
        linked_memory_ids: Vec::new(),
        entities: Vec::new(),
        text_lemmatized: String::new(),
        embedding: embedding.into(),
        provenance: Provenance::default(),
        state: StateInfo::default(),
    }
}

async fn bench_embedder(model_dir: PathBuf) {
    // Both precisions of the linear layers, int8 (the default on x86-64 with AVX2 and FMA) and f32.
    for precision in [Precision::Int8, Precision::F32] {
        let dir = model_dir.clone();
        let loaded =
            tokio::task::spawn_blocking(move || LocalEmbedder::load_with(&dir, DEFAULT_MAX_WINDOWS, precision));
        let Ok(embedder) = loaded.await.expect("task") else {
            println!("embedder: model not found, skipped (run scripts/fetch-model.sh)");
            return;
        };
        bench_precision(&embedder, &format!("{precision:?}").to_lowercase()).await;
    }
}

async fn bench_precision(embedder: &LocalEmbedder, precision: &str) {
    let queries = ["what food should the user avoid?", "where does the user live", "favourite programming language"];
    for query in queries {
        embedder.embed(query).await.expect("warm up");
    }
    let samples = (0..300).map(|i| queries[i % queries.len()]);
    let mut timings = Vec::new();
    for query in samples {
        let started = Instant::now();
        embedder.embed(query).await.expect("embed");
        timings.push(started.elapsed());
    }
    report(&format!("embed one query ({precision})"), timings);
    let batch: Vec<String> = (0..32).map(|i| format!("The user mentioned fact number {i} about their week")).collect();
    let mut timings = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        embedder.embed_batch(&batch).await.expect("embed batch");
        timings.push(started.elapsed() / 32);
    }
    report(&format!("embed per text in batches of 32 ({precision})"), timings);
    // An assistant reply of about 3,000 characters: three 256-token windows.
    let reply = "We compared the two flats again: the one near the river has the bigger kitchen and a balcony, \
                 but the other is closer to the station and the rent is lower by about a hundred euros a month. "
        .repeat(15);
    let mut timings = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        embedder.embed(&reply).await.expect("embed long");
        timings.push(started.elapsed());
    }
    report(&format!("embed a {}-character reply ({precision})", reply.len()), timings);
}

async fn bench_store(n: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("bench.db")).await.expect("open");
    store.ensure_dimension(DIM, "bench").await.expect("dimension");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // The measured scope holds n memories; two other scopes of n/2 sit beside it.
    let started = Instant::now();
    let mut inserted = 0;
    for (user, count) in [("target", n), ("other-a", n / 2), ("other-b", n / 2)] {
        for chunk_start in (0..count).step_by(500) {
            let batch: Vec<MemoryRecord> = (chunk_start..count.min(chunk_start + 500))
                .map(|index| memory("bench", user, index, rng.unit_vector()))
                .collect();
            inserted += batch.len();
            store.apply(&WriteSet::insert(&batch)).await.expect("insert");
        }
    }
    let elapsed = started.elapsed();
    println!(
        "insert {inserted} memories in batches of 500: {:.2?} ({:.0} rows/s)",
        elapsed,
        inserted as f64 / elapsed.as_secs_f64()
    );
    let query = ScopedQuery {
        tenant: "bench".into(),
        scope: Scope { user_id: Some("target".into()), agent_id: None, run_id: None },
        filter: None,
        show_expired: false,
        include_superseded: false,
        today: NaiveDate::from_ymd_opt(2026, 1, 1).expect("date"),
        fresh_since: None,
    };
    let mut timings = Vec::new();
    for _ in 0..50 {
        let probe = rng.unit_vector();
        let started = Instant::now();
        let hits = store.search(&query, &probe, 20, 0.0).await.expect("search");
        timings.push(started.elapsed());
        assert_eq!(hits.len(), 20);
    }
    report(&format!("search top-20 in a scope of {n}"), timings);
    let mut timings = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        store.list(&query, None, 100).await.expect("list");
        timings.push(started.elapsed());
    }
    report(&format!("list first page of 100 in a scope of {n}"), timings);
}

fn main() {
    // Before the runtime starts any thread (see `pin_thread_count`).
    mem0_core::providers::embedder::pin_thread_count();
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime").block_on(run());
}

async fn run() {
    let n: usize = std::env::var("BENCH_N").ok().and_then(|value| value.parse().ok()).unwrap_or(10_000);
    let model_dir = std::env::var("BENCH_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2")));
    bench_embedder(model_dir).await;
    bench_store(n).await;
}
