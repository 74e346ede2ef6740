//! Benchmark of real-length chat turns on the embedded default (local MiniLM embedder, SQLite):
//! what a verbatim add and a search cost when the text is an assistant reply of 300–3,000
//! characters that names people, places and organisations, compared with embedding that text
//! alone; what eight clients adding such turns at once cost in time and memory; and what the
//! write policy costs on such a turn.
//!
//! Run: `cargo bench -p mem0-core --bench long_turns` (env `BENCH_MODEL_DIR`, default
//! models/all-MiniLM-L6-v2; `BENCH_ROUNDS`, default 5 samples per measurement).
//!
//! The turns are generated (deterministic), not taken from a dataset: sentences in the style of
//! an assistant's reply, each naming one to three entities.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mem0_core::history::HistoryStore;
use mem0_core::memory::SearchMode;
use mem0_core::providers::embedder::{Embedder, LocalEmbedder};
use mem0_core::store::SqliteStore;
use mem0_core::{AddRequest, Caller, Memory, Message, Scope};

const DEFAULT_MODEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2");
/// Concurrent writers in the concurrency phase, and turns each adds.
const WRITERS: usize = 8;
const TURNS_PER_WRITER: usize = 3;

const PEOPLE: &[&str] = &[
    "Maria Gonzalez",
    "Tom Becker",
    "Aiko Tanaka",
    "Priya Raman",
    "Lars Eriksen",
    "Fatima Haddad",
    "Jonas Weber",
    "Chloe Martin",
];
const PLACES: &[&str] =
    &["Lisbon", "Portland", "Osaka", "Nairobi", "Valparaiso", "Edinburgh", "Riverside Clinic", "Lake Como"];
const THINGS: &[&str] = &[
    "the Atlas project",
    "Kubernetes",
    "the Harbor Street bakery",
    "PostgreSQL",
    "the Vienna Philharmonic",
    "Acme Robotics",
    "the Tour de France",
    "Duolingo",
];
const TEMPLATES: &[&str] = &[
    "You mentioned that {p} is moving to {l} next spring, so it may be worth planning the visit around that.",
    "Since {p} already works with {t}, I would ask them how they handled the first few weeks there.",
    "A good option in {l} is to book early: the places near the station fill up quickly in summer.",
    "Here is a step-by-step plan: first compare the costs, then check the dates with {p}, and finally \
     reserve the tickets for {l} once everyone agrees.",
    "If the goal is to get better at {t}, practising twenty minutes a day is more useful than one long \
     session at the weekend.",
    "Keep in mind that {p} said the deadline for {t} moved to the end of the month.",
    "For the trip to {l}, pack layers: the mornings are cold even when the afternoons are warm.",
    "{p} and {q} could share the work on {t}; one of them reviews while the other writes.",
    "I would not worry too much about the first draft; what matters is that {p} sees it before Friday.",
    "Many people in {l} recommend the small restaurants away from the centre, which are cheaper and quieter.",
];

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 33) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.next() % items.len()]
    }
}

/// An assistant-style reply of about `chars` characters (whole sentences; never longer).
fn turn(rng: &mut Rng, chars: usize) -> String {
    let mut text = String::new();
    loop {
        let sentence = rng
            .pick(TEMPLATES)
            .replace("{p}", rng.pick(PEOPLE))
            .replace("{q}", rng.pick(PEOPLE))
            .replace("{l}", rng.pick(PLACES))
            .replace("{t}", rng.pick(THINGS));
        if !text.is_empty() && text.len() + 1 + sentence.len() > chars {
            return text;
        }
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&sentence);
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    percentile(&samples, 0.5)
}

/// A field of `/proc/self/status` in kB (VmRSS, VmHWM), when the platform has it.
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets the peak-RSS counter (VmHWM) to the current RSS (Linux `clear_refs` 5).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn add_request(user: &str, text: String) -> AddRequest {
    AddRequest {
        scope: Scope { user_id: Some(user.to_owned()), agent_id: None, run_id: None },
        messages: vec![Message { role: "assistant".to_owned(), content: text, name: None }],
        infer: false,
        ..AddRequest::default()
    }
}

fn main() {
    // Before the runtime starts any thread (see `pin_thread_count`).
    mem0_core::providers::embedder::pin_thread_count();
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime").block_on(run());
}

async fn run() {
    let model_dir = std::env::var("BENCH_MODEL_DIR").map_or_else(|_| PathBuf::from(DEFAULT_MODEL_DIR), PathBuf::from);
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(5).max(1);
    let loaded = tokio::task::spawn_blocking({
        let model_dir = model_dir.clone();
        move || LocalEmbedder::load(&model_dir)
    });
    let embedder = match loaded.await.expect("task") {
        Ok(embedder) => embedder,
        Err(error) => {
            println!("long_turns: embedder not loaded from {}, skipped: {error}", model_dir.display());
            return;
        }
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("memories.db")).await.expect("open store");
    let history = HistoryStore::open(&dir.path().join("history.db")).await.expect("open history");
    let memory = Memory::new(Arc::new(store), history, Arc::new(embedder.clone())).await.expect("memory");
    let caller = Caller::local_admin("bench");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Warm-up: the first pass allocates the model's buffers.
    embedder.embed(&turn(&mut rng, 500)).await.expect("embed");

    println!("one client, {rounds} samples each, p50 (local MiniLM, SQLite):");
    println!(
        "{:>7} {:>12} {:>12} {:>7} {:>12} {:>12}",
        "chars", "embed alone", "add (verb.)", "ratio", "search dense", "search hyb."
    );
    for chars in [130, 500, 1_000, 2_000, 3_000] {
        let texts: Vec<String> = (0..rounds).map(|_| turn(&mut rng, chars)).collect();
        let mut alone = Vec::new();
        for text in &texts {
            let started = Instant::now();
            embedder.embed(text).await.expect("embed");
            alone.push(started.elapsed());
        }
        let mut adds = Vec::new();
        for text in &texts {
            let started = Instant::now();
            memory.add(&caller, add_request("single", text.clone())).await.expect("add");
            adds.push(started.elapsed());
        }
        let mut dense = Vec::new();
        let mut hybrid = Vec::new();
        for text in &texts {
            let started = Instant::now();
            memory
                .search(&caller, common::search_request("single", text.clone(), SearchMode::Dense))
                .await
                .expect("search");
            dense.push(started.elapsed());
            let started = Instant::now();
            memory
                .search(&caller, common::search_request("single", text.clone(), SearchMode::Hybrid))
                .await
                .expect("search");
            hybrid.push(started.elapsed());
        }
        let (alone, adds) = (p50(alone), p50(adds));
        println!(
            "{chars:>7} {:>12.1?} {:>12.1?} {:>6.1}× {:>12.1?} {:>12.1?}",
            alone,
            adds,
            adds.as_secs_f64() / alone.as_secs_f64(),
            p50(dense),
            p50(hybrid)
        );
    }

    // The write policy runs on every text before it is stored: its cost on a long turn.
    let policy = mem0_core::policy::Policy::default();
    let text = format!("{} My wifi password is Tr0ub4dor&3 and card 4111 1111 1111 1111.", turn(&mut rng, 3_000));
    let mut checks = Vec::new();
    for _ in 0..200 {
        let started = Instant::now();
        std::hint::black_box(policy.check("bench", &text));
        checks.push(started.elapsed());
    }
    println!("write policy check of a {}-char turn (default detectors): p50 {:.1?}", text.len(), p50(checks));

    let mb = |kb: Option<u64>| kb.map_or_else(|| "n/a".to_owned(), |kb| format!("{} MB", kb / 1024));

    // The worst single call: a batch of 40 texts of 3,000 characters.
    let batch: Vec<String> = (0..40).map(|_| turn(&mut rng, 3_000)).collect();
    let rss_before = status_kb("VmRSS:");
    reset_peak_rss();
    let started = Instant::now();
    embedder.embed_batch(&batch).await.expect("embed");
    println!(
        "\none batch of 40 texts of 3,000 chars: {:.1?}; RSS before {}, peak during {}",
        started.elapsed(),
        mb(rss_before),
        mb(status_kb("VmHWM:"))
    );

    // Eight clients at once, each adding turns of 1,500–3,000 characters.
    let turns: Vec<Vec<String>> = (0..WRITERS)
        .map(|_| {
            (0..TURNS_PER_WRITER)
                .map(|_| {
                    let chars = 1_500 + rng.next() % 1_500;
                    turn(&mut rng, chars)
                })
                .collect()
        })
        .collect();
    let rss_before = status_kb("VmRSS:");
    reset_peak_rss();
    let started = Instant::now();
    let writers: Vec<_> = turns
        .into_iter()
        .enumerate()
        .map(|(writer, texts)| {
            let memory = memory.clone();
            let caller = caller.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                for text in texts {
                    let started = Instant::now();
                    memory.add(&caller, add_request(&format!("writer-{writer}"), text)).await.expect("add");
                    latencies.push(started.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for writer in writers {
        latencies.extend(writer.await.expect("writer"));
    }
    let wall = started.elapsed();
    latencies.sort();
    println!(
        "\n{WRITERS} writers × {TURNS_PER_WRITER} turns of 1,500–3,000 chars: wall {wall:.1?}, {:.2} adds/s, \
         per add p50 {:.1?} max {:.1?}; RSS before {}, peak during {}",
        latencies.len() as f64 / wall.as_secs_f64(),
        percentile(&latencies, 0.5),
        latencies[latencies.len() - 1],
        mb(rss_before),
        mb(status_kb("VmHWM:")),
    );
}
