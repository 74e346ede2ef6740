//! Benchmark of what the per-search logs cost their writer: every search hit is an audit entry
//! (`audit_log`, in the history) and a read of a memory (`memory_reads`, in the store, for decay
//! by use). The server queues both on the request path and a background task writes them in
//! batches; this measures that task's work (this process's CPU, plus every `postgres` process's
//! for Postgres) per search of 20 hits over a user with 1,000 memories, for batches of one
//! search (a quiet server) and of 25 searches (a busy one).
//!
//! Run: `cargo bench -p mem0-core --bench logging` (SQLite; also Postgres when `DATABASE_URL` is
//! set, e.g. after `eval "$(scripts/pg-up.sh /tmp/pg)"`; env `BENCH_SEARCHES`, default 2,000).

mod common;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use chrono::Utc;
use mem0_core::decay::MemoryRead;
use mem0_core::error::ProviderError;
use mem0_core::history::{AuditAction, AuditEntry, AuditLog, HistoryStore};
use mem0_core::providers::embedder::Embedder;
use mem0_core::store::{PgVectorConfig, PgVectorStore, SqliteStore, VectorStore};
use mem0_core::{AddRequest, Caller, Memory, Message, Scope};
use uuid::Uuid;

const DIM: usize = 384;
const MEMORIES: usize = 1_000;
const HITS: usize = 20;

/// Hashed words: no model cost (the vectors do not matter here).
#[derive(Debug)]
struct StubEmbedder;

#[async_trait]
impl Embedder for StubEmbedder {
    fn dimension(&self) -> usize {
        DIM
    }

    fn model_id(&self) -> &str {
        "stub-hashed-words"
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut vector = vec![0.01_f32; DIM];
                for word in text.split_whitespace() {
                    let mut hasher = DefaultHasher::new();
                    word.hash(&mut hasher);
                    vector[(hasher.finish() % DIM as u64) as usize] += 1.0;
                }
                let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
                vector.into_iter().map(|v| v / norm).collect()
            })
            .collect())
    }
}

fn cpu(postgres: bool) -> f64 {
    let me = std::process::id();
    common::cpu_seconds(|pid, name| pid == me || (postgres && name == "postgres"))
}

/// The ids of search number `search`'s hits: 20 of the user's memories, skewed towards a few
/// popular ones as real searches are.
fn hits(ids: &[Uuid], search: usize) -> Vec<Uuid> {
    (0..HITS).map(|rank| ids[(search * 7 + rank * rank * 13) % (ids.len() / (1 + rank % 3))]).collect()
}

async fn loaded(store: Arc<dyn VectorStore>, history: HistoryStore) -> (Vec<Uuid>, Caller) {
    let memory = Memory::new(store, history, Arc::new(StubEmbedder)).await.expect("memory");
    let caller = Caller::local_admin("bench");
    let scope = Scope { user_id: Some("reader".to_owned()), agent_id: None, run_id: None };
    let mut ids = Vec::new();
    for batch in 0..MEMORIES / 50 {
        let messages = (0..50)
            .map(|index| Message {
                role: "user".to_owned(),
                content: format!("fact number {} about something", batch * 50 + index),
                name: None,
            })
            .collect();
        let added = memory
            .add(&caller, AddRequest { scope: scope.clone(), messages, infer: false, ..AddRequest::default() })
            .await
            .expect("add");
        ids.extend(added.results.iter().map(|added| added.id));
    }
    (ids, caller)
}

async fn measure(name: &str, store: Arc<dyn VectorStore>, history: HistoryStore, postgres: bool, searches: usize) {
    let audit: AuditLog = history.audit_log();
    let (ids, caller) = loaded(Arc::clone(&store), history).await;
    for per_batch in [1_usize, 25] {
        let started_cpu = cpu(postgres);
        let started = Instant::now();
        let mut audit_seconds = 0.0;
        for first in (0..searches).step_by(per_batch) {
            let batch: Vec<Vec<Uuid>> = (first..(first + per_batch).min(searches)).map(|s| hits(&ids, s)).collect();
            let now = Utc::now();
            let entries: Vec<AuditEntry> = batch
                .iter()
                .flatten()
                .map(|id| AuditEntry {
                    id: 0,
                    at: now,
                    tenant: caller.tenant.clone(),
                    principal_id: "key:bench".to_owned(),
                    action: AuditAction::SearchHit,
                    memory_id: Some(id.to_string()),
                    request_id: Some(Uuid::new_v4().to_string()),
                    detail: None,
                })
                .collect();
            let audit_started = Instant::now();
            audit.append(&entries).await.expect("audit");
            audit_seconds += audit_started.elapsed().as_secs_f64();
            let reads: Vec<MemoryRead> = batch
                .iter()
                .flatten()
                .map(|id| MemoryRead { tenant: caller.tenant.clone(), memory_id: *id, at: now })
                .collect();
            store.record_reads(&reads).await.expect("reads");
        }
        let wall = started.elapsed().as_secs_f64();
        let used = cpu(postgres) - started_cpu;
        println!(
            "{name:<9} {per_batch:>2} searches/batch: {:>6.0} µs CPU per search (audit + reads), wall {:>5.0} µs \
             ({:>5.0} µs audit)",
            used / searches as f64 * 1e6,
            wall / searches as f64 * 1e6,
            audit_seconds / searches as f64 * 1e6,
        );
    }
}

#[tokio::main]
async fn main() {
    let searches: usize = std::env::var("BENCH_SEARCHES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    println!("{HITS} hits per search, {MEMORIES} memories, {searches} searches per row");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("memories.db")).await.expect("sqlite store");
    let history = HistoryStore::open(&dir.path().join("history.db")).await.expect("history");
    measure("sqlite", Arc::new(store), history, false, searches).await;

    if let Ok(admin_url) = std::env::var("DATABASE_URL") {
        let name = format!("mem0_bench_{}", Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&admin_url).await.expect("connect");
        sqlx::query(&format!("create database {name}")).execute(&admin).await.expect("create database");
        let url = format!("{}/{name}", admin_url.rsplit_once('/').expect("url").0);
        let store = PgVectorStore::connect(&url, &PgVectorConfig::default()).await.expect("connect");
        let history = HistoryStore::in_postgres(&store);
        measure("postgres", Arc::new(store), history, true, searches).await;
        let _ = sqlx::query(&format!("drop database {name} with (force)")).execute(&admin).await;
    }
}
