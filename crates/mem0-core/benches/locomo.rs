//! LoCoMo retrieval benchmark: how well search finds the evidence turns of the LoCoMo questions.
//!
//! Every turn of the ten LoCoMo conversations is stored verbatim (`infer=false`) through the
//! embedded default service (SQLite store, SQLite history, local MiniLM embedder), one scope per
//! conversation. Each question of categories 1-4 is then searched (top 20) in its conversation's
//! scope and the returned memories are mapped back to their turns (`dia_id`). Reported per search
//! mode and per category: evidence recall@1/5/10/20, MRR within the top 20, and search latency.
//! No LLM is involved; this measures retrieval only.
//!
//! Run: `cargo bench -p mem0-core --bench locomo`. Environment:
//! - `LOCOMO_PATH`: the dataset (default `../shared/datasets/locomo/locomo10.json` beside the repo;
//!   it is CC BY-NC 4.0 and must not be copied into the repository),
//! - `LOCOMO_MODES`: comma-separated subset of `dense,keyword,hybrid` (default all three),
//! - `LOCOMO_LIMIT`: only the first N conversations,
//! - `LOCOMO_WEIGHTS`: hybrid weight triples `semantic,keyword,entity` separated by `;` (one
//!   hybrid run each; default the configured weights),
//! - `LOCOMO_THRESHOLD`: the search `threshold` (default the server's default,
//!   `memory::DEFAULT_THRESHOLD`; `0` ranks every candidate),
//! - `LOCOMO_PRECISION`: `f32` or `int8`, the local embedder's weights (default `auto`),
//! - `BENCH_MODEL_DIR`: the MiniLM model (default `models/all-MiniLM-L6-v2`, see `scripts/fetch-model.sh`),
//! - `LOCOMO_JOIN`: store N consecutive turns of a session as one memory (default 1), to stand in
//!   for long messages; a memory then counts as returning each turn it holds, and recall is also
//!   reported apart for questions whose evidence starts past the first 1,000 characters of its
//!   memory (beyond the embedder's first 256-token window),
//! - `LOCOMO_WINDOWS`: most 256-token windows the local embedder embeds per text (default its
//!   default; 1 cuts texts after the first window).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDateTime, Utc};
use mem0_core::history::HistoryStore;
use mem0_core::memory::{SearchMode, MAX_MESSAGES};
use mem0_core::providers::embedder::{LocalEmbedder, Precision, DEFAULT_MAX_WINDOWS};
use mem0_core::retrieval::RetrievalSettings;
use mem0_core::store::SqliteStore;
use mem0_core::{AddRequest, Caller, Memory, Message, Scope, SearchRequest};
use serde::Deserialize;
use serde_json::{Map, Value};
use uuid::Uuid;

const DEFAULT_DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/datasets/locomo/locomo10.json");
const DEFAULT_MODEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2");
const TOP_K: usize = 20;
const CUTOFFS: [usize; 4] = [1, 5, 10, 20];
const CATEGORIES: [(u8, &str); 4] = [(1, "multi-hop"), (2, "temporal"), (3, "open-domain"), (4, "single-hop")];
/// Evidence starting this far into its memory lies past the first window of ~256 tokens.
const HEAD_CHARS: usize = 1_000;

#[derive(Deserialize)]
struct Sample {
    sample_id: String,
    conversation: Map<String, Value>,
    qa: Vec<Qa>,
}

#[derive(Deserialize)]
struct Qa {
    question: String,
    #[serde(default)]
    evidence: Vec<String>,
    category: u8,
}

#[derive(Deserialize)]
struct Turn {
    speaker: String,
    dia_id: String,
    text: String,
    #[serde(default)]
    blip_caption: Option<String>,
}

/// A question of categories 1-4 with a usable evidence set.
struct Question {
    scope: Scope,
    text: String,
    category: u8,
    evidence: HashSet<String>,
    /// Some evidence starts past [`HEAD_CHARS`] into its memory.
    tail: bool,
}

/// Where each turn went: memory id → the turns it holds; turn → character offset in its memory.
#[derive(Default)]
struct Stored {
    turns_of: HashMap<Uuid, Vec<String>>,
    offset_of: HashMap<(String, String), usize>,
    /// The date of each conversation's last session: the reference time of its questions.
    latest: HashMap<String, chrono::DateTime<chrono::Utc>>,
}

/// Sums of per-question scores over a set of questions.
#[derive(Default)]
struct Score {
    count: usize,
    recall: [f64; CUTOFFS.len()],
    mrr: f64,
}

impl Score {
    /// `ranked`: the turns each returned memory holds, best first.
    fn record(&mut self, ranked: &[&[String]], evidence: &HashSet<String>) {
        self.count += 1;
        for (sum, cutoff) in self.recall.iter_mut().zip(CUTOFFS) {
            let found: HashSet<&String> =
                ranked.iter().take(cutoff).flat_map(|turns| turns.iter()).filter(|id| evidence.contains(*id)).collect();
            *sum += found.len() as f64 / evidence.len() as f64;
        }
        if let Some(rank) = ranked.iter().position(|turns| turns.iter().any(|id| evidence.contains(id))) {
            self.mrr += 1.0 / (rank + 1) as f64;
        }
    }

    fn mean(&self, sum: f64) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            sum / self.count as f64
        }
    }

    /// Mean recall at `CUTOFFS[2]` (10).
    fn r10(&self) -> f64 {
        self.mean(self.recall[2])
    }
}

struct ModeResult {
    mode: SearchMode,
    label: String,
    by_category: BTreeMap<u8, Score>,
    overall: Score,
    /// Questions with evidence past the first window, and the others (with `LOCOMO_JOIN`).
    tail: Score,
    head: Score,
    latencies: Vec<Duration>,
}

fn mode_name(mode: SearchMode) -> &'static str {
    match mode {
        SearchMode::Dense => "dense",
        SearchMode::Keyword => "keyword",
        SearchMode::Hybrid => "hybrid",
    }
}

fn category_name(category: u8) -> &'static str {
    CATEGORIES.iter().find(|(id, _)| *id == category).map_or("?", |(_, name)| name)
}

/// `D<session>:<turn>` with leading zeros dropped ("D30:05" → "D30:5"); None when malformed.
fn normalise_dia_id(token: &str) -> Option<String> {
    let (session, turn) = token.strip_prefix('D')?.split_once(':')?;
    let session: u32 = session.parse().ok()?;
    let turn: u32 = turn.parse().ok()?;
    Some(format!("D{session}:{turn}"))
}

/// "1:56 pm on 8 May, 2023" as UTC.
fn session_time(text: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(text.trim(), "%I:%M %p on %d %B, %Y").ok().map(|at| at.and_utc())
}

/// The `session_<n>` lists of a conversation, numerically sorted, with their parsed date.
fn sessions(conversation: &Map<String, Value>) -> Vec<(u32, Vec<Turn>, Option<DateTime<Utc>>)> {
    let mut sessions: Vec<_> = conversation
        .iter()
        .filter_map(|(key, value)| {
            let number: u32 = key.strip_prefix("session_")?.parse().ok()?;
            value.as_array()?;
            let turns: Vec<Turn> = serde_json::from_value(value.clone()).expect("session turns");
            let date = conversation.get(&format!("{key}_date_time")).and_then(Value::as_str).and_then(session_time);
            Some((number, turns, date))
        })
        .collect();
    sessions.sort_by_key(|(number, _, _)| *number);
    sessions
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn joined() -> usize {
    std::env::var("LOCOMO_JOIN").ok().and_then(|value| value.parse().ok()).unwrap_or(1).max(1)
}

/// Stores every turn (`LOCOMO_JOIN` consecutive turns of a session per memory); returns where
/// each went and, per conversation, the dia_ids that exist.
async fn ingest(memory: &Memory, caller: &Caller, samples: &[Sample]) -> (Stored, HashMap<String, HashSet<String>>) {
    let join = joined();
    let mut stored = Stored::default();
    let mut known = HashMap::new();
    let (mut turns_total, mut memories, mut undated) = (0, 0, 0);
    let started = Instant::now();
    for sample in samples {
        let scope = Scope::new(Some(&sample.sample_id), None, None).expect("scope");
        let ids: &mut HashSet<String> = known.entry(sample.sample_id.clone()).or_default();
        for (_, turns, date) in sessions(&sample.conversation) {
            undated += usize::from(date.is_none());
            if let Some(date) = date {
                let latest = stored.latest.entry(sample.sample_id.clone()).or_insert(date);
                *latest = (*latest).max(date);
            }
            // One message per memory: `join` turns, one per line, with their offsets.
            let mut contents: Vec<(String, Vec<String>, Option<String>)> = Vec::new();
            for group in turns.chunks(join) {
                let (mut content, mut held) = (String::new(), Vec::new());
                for turn in group {
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    let dia_id = normalise_dia_id(&turn.dia_id).unwrap_or_else(|| turn.dia_id.clone());
                    stored.offset_of.insert((sample.sample_id.clone(), dia_id.clone()), content.chars().count());
                    content.push_str(&format!("{}: {}", turn.speaker, turn.text));
                    if let Some(caption) = &turn.blip_caption {
                        content.push_str(&format!(" [shares {caption}]"));
                    }
                    ids.insert(dia_id.clone());
                    held.push(dia_id);
                }
                turns_total += group.len();
                // A memory of one turn is named after its speaker, as a chat client would send it.
                let name = (group.len() == 1).then(|| group[0].speaker.clone());
                contents.push((content, held, name));
            }
            for chunk in contents.chunks(MAX_MESSAGES) {
                let messages: Vec<Message> = chunk
                    .iter()
                    .map(|(content, _, name)| Message {
                        role: "user".into(),
                        content: content.clone(),
                        name: name.clone(),
                    })
                    .collect();
                let request =
                    AddRequest { scope: scope.clone(), messages, infer: false, timestamp: date, ..Default::default() };
                let outcome = memory.add(caller, request).await.expect("add");
                assert_eq!(outcome.results.len(), chunk.len(), "one memory per message");
                for (added, (_, held, _)) in outcome.results.iter().zip(chunk) {
                    stored.turns_of.insert(added.id, held.clone());
                }
                memories += chunk.len();
            }
        }
    }
    let elapsed = started.elapsed();
    println!(
        "ingest: {turns_total} turns of {} conversations as {memories} memories ({join} turns each) in {elapsed:.2?} \
         ({:.0} turns/s); sessions without a parsable date: {undated}",
        samples.len(),
        turns_total as f64 / elapsed.as_secs_f64()
    );
    (stored, known)
}

/// Questions of categories 1-4 with their evidence parsed leniently; prints what was dropped.
fn questions(samples: &[Sample], known: &HashMap<String, HashSet<String>>, stored: &Stored) -> Vec<Question> {
    let (mut adversarial, mut no_evidence, mut all_dropped) = (0, 0, 0);
    let (mut repaired, mut malformed, mut unknown) = (Vec::new(), Vec::new(), Vec::new());
    let mut questions = Vec::new();
    for sample in samples {
        let scope = Scope::new(Some(&sample.sample_id), None, None).expect("scope");
        let ids = &known[&sample.sample_id];
        for qa in &sample.qa {
            if !(1..=4).contains(&qa.category) {
                adversarial += 1;
                continue;
            }
            let mut evidence = HashSet::new();
            for raw in &qa.evidence {
                let tokens: Vec<&str> =
                    raw.split(|c: char| c == ';' || c.is_whitespace()).filter(|token| !token.is_empty()).collect();
                for token in &tokens {
                    let Some(id) = normalise_dia_id(token) else {
                        malformed.push(format!("{}/{raw:?}", sample.sample_id));
                        continue;
                    };
                    if tokens.len() > 1 || id != *token {
                        repaired.push(format!("{}/{raw:?}", sample.sample_id));
                    }
                    if ids.contains(&id) {
                        evidence.insert(id);
                    } else {
                        unknown.push(format!("{}/{id}", sample.sample_id));
                    }
                }
            }
            if evidence.is_empty() {
                if qa.evidence.is_empty() {
                    no_evidence += 1;
                } else {
                    all_dropped += 1;
                }
                continue;
            }
            let tail = evidence.iter().any(|id| {
                stored
                    .offset_of
                    .get(&(sample.sample_id.clone(), id.clone()))
                    .is_some_and(|offset| *offset >= HEAD_CHARS)
            });
            questions.push(Question {
                scope: scope.clone(),
                text: qa.question.clone(),
                category: qa.category,
                evidence,
                tail,
            });
        }
    }
    println!(
        "questions: {} of categories 1-4 evaluated; skipped: {no_evidence} without evidence, {all_dropped} whose \
         evidence was all dropped; {adversarial} of category 5 excluded",
        questions.len()
    );
    repaired.dedup();
    println!("evidence strings repaired by splitting or normalising: {} {repaired:?}", repaired.len());
    println!(
        "evidence dropped: {} malformed {malformed:?}; {} not in the conversation {unknown:?}",
        malformed.len(),
        unknown.len()
    );
    questions
}

async fn run_mode(
    memory: &Memory,
    caller: &Caller,
    questions: &[Question],
    stored: &Stored,
    mode: SearchMode,
) -> mem0_core::Result<ModeResult> {
    let label = if mode == SearchMode::Hybrid {
        let weights = memory.retrieval().normalised_weights();
        format!("hybrid {:.2}/{:.2}/{:.2}", weights[0], weights[1], weights[2])
    } else {
        mode_name(mode).to_owned()
    };
    let mut result = ModeResult {
        mode,
        label,
        by_category: BTreeMap::new(),
        overall: Score::default(),
        tail: Score::default(),
        head: Score::default(),
        latencies: Vec::new(),
    };
    for question in questions {
        let request = SearchRequest {
            scope: question.scope.clone(),
            filter: None,
            query: question.text.clone(),
            top_k: TOP_K,
            threshold: threshold(),
            show_expired: true,
            include_superseded: false,
            // LOCOMO_TEMPORAL=1: read time in the questions, against the conversation's last session.
            temporal: std::env::var("LOCOMO_TEMPORAL").is_ok_and(|value| value == "1"),
            reference_time: question.scope.user_id.as_ref().and_then(|id| stored.latest.get(id)).copied(),
            decay: None,
            mode,
            explain: false,
            rerank: false,
        };
        let started = Instant::now();
        let outcome = memory.search(caller, request).await?;
        result.latencies.push(started.elapsed());
        let ranked: Vec<&[String]> =
            outcome.results.iter().map(|item| stored.turns_of.get(&item.id).map_or(&[][..], Vec::as_slice)).collect();
        result.by_category.entry(question.category).or_default().record(&ranked, &question.evidence);
        result.overall.record(&ranked, &question.evidence);
        let part = if question.tail { &mut result.tail } else { &mut result.head };
        part.record(&ranked, &question.evidence);
    }
    result.latencies.sort();
    Ok(result)
}

fn threshold() -> f32 {
    std::env::var("LOCOMO_THRESHOLD")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(mem0_core::memory::DEFAULT_THRESHOLD)
}

fn score_row(label: &str, score: &Score) -> String {
    let recalls: Vec<String> = score.recall.iter().map(|sum| format!("{:.3}", score.mean(*sum))).collect();
    format!("| {label} | {} | {} | {:.3} |", score.count, recalls.join(" | "), score.mean(score.mrr))
}

fn print_mode(result: &ModeResult) {
    let latencies = &result.latencies;
    println!(
        "\n### {} (top {TOP_K}, threshold {}; search p50 {:.2?}, p95 {:.2?}, n={})\n",
        result.label,
        threshold(),
        percentile(latencies, 0.50),
        percentile(latencies, 0.95),
        latencies.len()
    );
    println!("| category | questions | R@1 | R@5 | R@10 | R@20 | MRR |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (category, score) in &result.by_category {
        println!("{}", score_row(&format!("{category} {}", category_name(*category)), score));
    }
    println!("{}", score_row("**all**", &result.overall));
    if result.tail.count > 0 {
        println!("{}", score_row(&format!("evidence within the first {HEAD_CHARS} chars"), &result.head));
        println!("{}", score_row(&format!("evidence past the first {HEAD_CHARS} chars"), &result.tail));
    }
}

fn print_summary(results: &[ModeResult]) {
    // Overall R@10, then R@10 of each category.
    let r10s = |result: &ModeResult| -> Vec<f64> {
        let categories =
            CATEGORIES.iter().map(|(category, _)| result.by_category.get(category).map_or(0.0, Score::r10));
        std::iter::once(result.overall.r10()).chain(categories).collect()
    };
    let dense = results.iter().find(|result| result.mode == SearchMode::Dense).map(r10s);
    let names: Vec<&str> = CATEGORIES.iter().map(|(_, name)| *name).collect();
    println!("\n### R@10 by mode (difference to dense)\n");
    println!("| mode | all | {} | p50 | p95 |", names.join(" | "));
    println!("|---|---:|{}---:|---:|", "---:|".repeat(names.len()));
    for result in results {
        let cells: Vec<String> = r10s(result)
            .into_iter()
            .enumerate()
            .map(|(index, value)| match &dense {
                Some(base) if result.mode != SearchMode::Dense => format!("{value:.3} ({:+.3})", value - base[index]),
                _ => format!("{value:.3}"),
            })
            .collect();
        println!(
            "| {} | {} | {:.2?} | {:.2?} |",
            result.label,
            cells.join(" | "),
            percentile(&result.latencies, 0.50),
            percentile(&result.latencies, 0.95)
        );
    }
}

/// One service per `semantic,keyword,entity` triple in `LOCOMO_WEIGHTS` (`;`-separated), or the
/// service as configured.
fn weighted(memory: &Memory) -> Vec<Memory> {
    let Ok(list) = std::env::var("LOCOMO_WEIGHTS") else {
        return vec![memory.clone()];
    };
    list.split(';')
        .filter_map(|triple| {
            let weights: Vec<f32> = triple.split(',').filter_map(|value| value.trim().parse().ok()).collect();
            let [semantic_weight, keyword_weight, entity_weight] = weights[..] else {
                println!("LOCOMO_WEIGHTS: {triple:?} is not semantic,keyword,entity; ignored");
                return None;
            };
            let settings = RetrievalSettings { semantic_weight, keyword_weight, entity_weight, ..*memory.retrieval() };
            Some(memory.clone().with_retrieval(settings))
        })
        .collect()
}

fn selected_modes() -> Vec<SearchMode> {
    let Ok(list) = std::env::var("LOCOMO_MODES") else {
        return vec![SearchMode::Dense, SearchMode::Keyword, SearchMode::Hybrid];
    };
    list.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .filter_map(|name| match name.to_ascii_lowercase().as_str() {
            "dense" => Some(SearchMode::Dense),
            "keyword" => Some(SearchMode::Keyword),
            "hybrid" => Some(SearchMode::Hybrid),
            other => {
                println!("LOCOMO_MODES: unknown mode {other:?} ignored (use dense, keyword, hybrid)");
                None
            }
        })
        .collect()
}

fn main() {
    // Before the runtime starts any thread (see `pin_thread_count`).
    mem0_core::providers::embedder::pin_thread_count();
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime").block_on(run());
}

async fn run() {
    let data_path = std::env::var("LOCOMO_PATH").map_or_else(|_| PathBuf::from(DEFAULT_DATA), PathBuf::from);
    let Ok(raw) = std::fs::read(&data_path) else {
        println!("locomo: dataset not found at {}; skipped (set LOCOMO_PATH)", data_path.display());
        return;
    };
    let mut samples: Vec<Sample> = serde_json::from_slice(&raw).expect("locomo10.json format");
    if let Some(limit) = std::env::var("LOCOMO_LIMIT").ok().and_then(|value| value.parse().ok()) {
        samples.truncate(limit);
    }
    let model_dir = std::env::var("BENCH_MODEL_DIR").map_or_else(|_| PathBuf::from(DEFAULT_MODEL_DIR), PathBuf::from);
    let loaded = tokio::task::spawn_blocking({
        let model_dir = model_dir.clone();
        let windows = std::env::var("LOCOMO_WINDOWS").ok().and_then(|value| value.parse().ok());
        let precision = match std::env::var("LOCOMO_PRECISION").as_deref() {
            Ok("f32") => Precision::F32,
            Ok("int8") => Precision::Int8,
            _ => Precision::Auto,
        };
        move || LocalEmbedder::load_with(&model_dir, windows.unwrap_or(DEFAULT_MAX_WINDOWS), precision)
    });
    let embedder = match loaded.await.expect("task") {
        Ok(embedder) => embedder,
        Err(error) => {
            println!(
                "locomo: embedder not loaded from {}, skipped (fetch it with scripts/fetch-model.sh): {error}",
                model_dir.display()
            );
            return;
        }
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("memories.db")).await.expect("open store");
    let history = HistoryStore::open(&dir.path().join("history.db")).await.expect("open history");
    let memory = Memory::new(Arc::new(store), history, Arc::new(embedder)).await.expect("memory");
    let caller = Caller::local_admin("bench");

    let (stored, known) = ingest(&memory, &caller, &samples).await;
    let questions = questions(&samples, &known, &stored);
    if questions.is_empty() {
        println!("locomo: no questions to run");
        return;
    }
    let mut results = Vec::new();
    for mode in selected_modes() {
        // Hybrid runs once per weight triple of LOCOMO_WEIGHTS (default: the configured weights).
        let services: Vec<Memory> = if mode == SearchMode::Hybrid { weighted(&memory) } else { vec![memory.clone()] };
        for service in &services {
            match run_mode(service, &caller, &questions, &stored, mode).await {
                Ok(result) => {
                    print_mode(&result);
                    results.push(result);
                }
                Err(error) => println!("\n{}: search failed ({error}); mode skipped", mode_name(mode)),
            }
        }
    }
    if !results.is_empty() {
        print_summary(&results);
    }
}
