//! Benchmark of what the observability decorators cost each store operation: `ObservedStore`
//! (a histogram observation in `mem0_store_operation_duration_seconds` and a tracing span) against
//! the bare SQLite store, on a read by id that finds nothing (one cheap indexed query, so the
//! difference is not lost in the operation itself), without a tracing subscriber and with the
//! server's log layer (a fmt layer at info, writing to a sink), which makes every span real.
//! Blocks of the two variants alternate so drift hits both.
//!
//! Run: `cargo bench -p mem0-core --bench observability` (env `BENCH_OPS`, default 20,000 per
//! variant).

use std::sync::Arc;
use std::time::Instant;

use mem0_core::metrics::ObservedStore;
use mem0_core::store::{SqliteStore, VectorStore};
use uuid::Uuid;

async fn per_op(store: &Arc<dyn VectorStore>, ops: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..ops {
        let found = store.get("bench", Uuid::now_v7()).await.expect("get");
        assert!(found.is_none());
    }
    started.elapsed().as_secs_f64() * 1e6 / ops as f64
}

async fn compare(label: &str, bare: &Arc<dyn VectorStore>, observed: &Arc<dyn VectorStore>, ops: usize) {
    let block = (ops / 10).max(1);
    let (mut plain, mut wrapped) = (Vec::new(), Vec::new());
    per_op(bare, block).await; // warm-up
    per_op(observed, block).await;
    for _ in 0..10 {
        plain.push(per_op(bare, block).await);
        wrapped.push(per_op(observed, block).await);
    }
    plain.sort_by(f64::total_cmp);
    wrapped.sort_by(f64::total_cmp);
    let (plain, wrapped) = (plain[plain.len() / 2], wrapped[wrapped.len() / 2]);
    println!(
        "{label:<34} bare {plain:>7.2} µs/op   observed {wrapped:>7.2} µs/op   difference {:>+6.2} µs",
        wrapped - plain
    );
}

#[tokio::main]
async fn main() {
    let ops: usize = std::env::var("BENCH_OPS").ok().and_then(|raw| raw.parse().ok()).unwrap_or(20_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let bare: Arc<dyn VectorStore> = Arc::new(SqliteStore::open(&dir.path().join("bench.db")).await.expect("store"));
    let observed = ObservedStore::wrap(Arc::clone(&bare));
    println!("store read by id (no row), {ops} per variant, median of 10 alternating blocks");
    compare("no tracing subscriber", &bare, &observed, ops).await;
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("mem0_core=info,warn"))
        .with_writer(std::io::sink)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    compare("the server's log layer (info)", &bare, &observed, ops).await;
}
