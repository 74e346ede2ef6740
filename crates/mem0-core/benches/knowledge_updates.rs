//! Knowledge updates: facts that change over time (homes, employers, cars, diets, gyms, a
//! project's test command), told in several sessions, some of them late (a value told after the
//! one that replaced it). Each user's history is stored twice on the embedded default (SQLite,
//! local MiniLM): as Mem0 stores it (every fact added, ordered by when it was told) and with state
//! keys and event times (`crate::state`). Questions, with gold answers as memory ids:
//! - current value ("Where does the user live?"): is the top-1 hybrid hit the current value?
//! - previous value: the top-1 hit of "before" questions, or the chain (`superseded_by` of the
//!   current value's predecessor) with state keys;
//! - when: does the answering memory carry the time the change happened (`event_time`, else its
//!   observation time)?
//! - at a time ("Where did the user live in June 2025?", a month in the middle of the previous
//!   value's validity): is the top-1 hit the value true then? With state keys the query's time is
//!   read (`crate::temporal`); Mem0's way has no such reading.
//!
//! Run: `cargo bench -p mem0-core --bench knowledge_updates` (env `BENCH_USERS`, default 40;
//! `BENCH_MODEL_DIR`, default models/all-MiniLM-L6-v2). The histories are generated
//! (deterministic), with 15 unrelated facts per user beside the changing ones.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use mem0_core::history::HistoryStore;
use mem0_core::memory::SearchMode;
use mem0_core::providers::embedder::LocalEmbedder;
use mem0_core::store::SqliteStore;
use mem0_core::{AddRequest, Caller, ListRequest, Memory, Message, Scope, SearchRequest};
use uuid::Uuid;

const DEFAULT_MODEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2");

/// One attribute that changes: its key, how it is said, the questions, the values.
struct Attribute {
    key: &'static str,
    said: &'static [&'static str],
    current: &'static str,
    /// The current-value question worded differently (written after the key matching's
    /// thresholds were chosen on `current`: a held-out check).
    reworded: &'static str,
    previous: &'static str,
    when: &'static str,
    values: &'static [&'static str],
}

const ATTRIBUTES: &[Attribute] = &[
    Attribute {
        key: "user.home_city",
        said: &["I live in {v}", "I moved to {v}", "We just settled in {v}", "Home is {v} these days"],
        current: "Where does the user live?",
        reworded: "Which city is the user based in?",
        previous: "Where did the user live before?",
        when: "When did the user move to {v}?",
        values: &["Lisbon", "Osaka", "Denver", "Nairobi", "Edinburgh", "Valparaiso", "Hamburg", "Montreal"],
    },
    Attribute {
        key: "user.employer",
        said: &["I work at {v}", "I started a new job at {v}", "I joined {v}", "My employer is {v}"],
        current: "Where does the user work?",
        reworded: "Which company employs the user?",
        previous: "Where did the user work before?",
        when: "When did the user start at {v}?",
        values: &["Siemens", "Acme Robotics", "Globex", "Initech", "Umbrella Labs", "Stark Industries", "Wayne Foods"],
    },
    Attribute {
        key: "user.car",
        said: &["I drive a {v}", "I bought a {v}", "My car is a {v}"],
        current: "What car does the user drive?",
        reworded: "What vehicle does the user own?",
        previous: "What car did the user drive before?",
        when: "When did the user get the {v}?",
        values: &["Volvo V60", "Toyota Corolla", "Tesla Model 3", "Fiat Panda", "Subaru Outback", "Honda Civic"],
    },
    Attribute {
        key: "user.diet",
        said: &["I eat {v} now", "I switched to a {v} diet", "I am {v}"],
        current: "What diet does the user follow?",
        reworded: "What does the user eat?",
        previous: "What diet did the user follow before?",
        when: "When did the user go {v}?",
        values: &["vegetarian", "vegan", "keto", "pescatarian", "omnivore"],
    },
    Attribute {
        key: "user.gym",
        said: &["I go to {v}", "I train at {v}", "I switched gyms to {v}"],
        current: "Which gym does the user go to?",
        reworded: "Where does the user exercise?",
        previous: "Which gym did the user go to before?",
        when: "When did the user join {v}?",
        values: &["Iron Temple", "FitHub Central", "Crossfit North", "Bouldering Loft", "Harbor Swim Club"],
    },
    Attribute {
        key: "project.test_command",
        said: &["The test command is {v}", "Run the tests with {v}", "We now use {v} to run the tests"],
        current: "What is the project's test command?",
        reworded: "How do I run the project's tests?",
        previous: "What was the project's test command before?",
        when: "When did the project switch to {v}?",
        values: &["cargo test", "make check", "pytest -q", "npm test", "just test", "bazel test //..."],
    },
];

const UNRELATED: &[&str] = &[
    "I like hiking on weekends",
    "My sister is called Lena",
    "I am allergic to peanuts",
    "I play the cello",
    "My favourite film is Spirited Away",
    "I have a cat named Miso",
    "I prefer window seats on planes",
    "I am learning Portuguese",
    "My birthday is in October",
    "I collect vinyl records",
    "I do not drink coffee after noon",
    "My brother Tom is a nurse",
    "I volunteer at the food bank",
    "I read science fiction",
    "I support the local football club",
];

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One statement of a user's history.
#[derive(Clone)]
struct Statement {
    text: String,
    key: Option<&'static str>,
    /// When it became true.
    event: DateTime<Utc>,
    /// When it was told.
    told: DateTime<Utc>,
}

/// One attribute's chain for one user: the values in event order.
struct Chain {
    attribute: &'static Attribute,
    values: Vec<&'static str>,
    texts: Vec<String>,
    events: Vec<DateTime<Utc>>,
}

fn history(rng: &mut Rng) -> (Vec<Statement>, Vec<Chain>) {
    let start = Utc.with_ymd_and_hms(2024, 1, 1, 9, 0, 0).single().expect("time");
    let mut statements = Vec::new();
    let mut chains = Vec::new();
    for attribute in ATTRIBUTES {
        let length = 2 + rng.below(3);
        let mut pool: Vec<&str> = attribute.values.to_vec();
        let mut values = Vec::new();
        let mut texts = Vec::new();
        let mut events = Vec::new();
        let mut at = start + Duration::days(rng.below(60) as i64);
        for _ in 0..length {
            let value = pool.remove(rng.below(pool.len()));
            let text = attribute.said[rng.below(attribute.said.len())].replace("{v}", value);
            values.push(value);
            texts.push(text.clone());
            events.push(at);
            // Mostly told within a few days; one in four told weeks after the next change.
            let delay = if rng.below(4) == 0 { 120 + rng.below(60) } else { rng.below(5) };
            statements.push(Statement {
                text,
                key: Some(attribute.key),
                event: at,
                told: at + Duration::days(delay as i64),
            });
            at += Duration::days(30 + rng.below(90) as i64);
        }
        chains.push(Chain { attribute, values, texts, events });
    }
    for (index, text) in UNRELATED.iter().enumerate() {
        let at = start + Duration::days(index as i64 * 20);
        statements.push(Statement { text: (*text).to_owned(), key: None, event: at, told: at });
    }
    statements.sort_by_key(|statement| statement.told);
    (statements, chains)
}

#[derive(Default)]
struct Score {
    current: usize,
    reworded: usize,
    before_event: usize,
    previous: usize,
    when: usize,
    at_time: usize,
    questions: usize,
    previous_questions: usize,
}

fn main() {
    // Before the runtime starts any thread (see `pin_thread_count`).
    mem0_core::providers::embedder::pin_thread_count();
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime").block_on(run());
}

async fn run() {
    let users: usize = std::env::var("BENCH_USERS").ok().and_then(|value| value.parse().ok()).unwrap_or(40);
    let model_dir = std::env::var("BENCH_MODEL_DIR").map_or_else(|_| PathBuf::from(DEFAULT_MODEL_DIR), PathBuf::from);
    let Ok(embedder) = LocalEmbedder::load(&model_dir) else {
        println!("knowledge_updates: model not found at {} (run scripts/fetch-model.sh)", model_dir.display());
        return;
    };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let histories: Vec<(Vec<Statement>, Vec<Chain>)> = (0..users).map(|_| history(&mut rng)).collect();
    let memories: usize = histories.iter().map(|(statements, _)| statements.len()).sum();
    let late = histories
        .iter()
        .flat_map(|(statements, _)| {
            statements.windows(2).filter(|pair| pair[1].event < pair[0].event && pair[1].key.is_some())
        })
        .count();
    println!(
        "knowledge updates: {users} users, {memories} memories ({} changing attributes each, {late} told after a later value)",
        ATTRIBUTES.len()
    );
    println!(
        "| store as | current value top-1 | same, reworded question | previous value | before <the current value> | when (event time) | value at a named time |"
    );
    println!("|---|---|---|---|---|---|---|");
    for keyed in [false, true] {
        let score = evaluate(&embedder, &histories, keyed).await;
        let share = |hits: usize, of: usize| format!("{:.1} % ({hits}/{of})", 100.0 * hits as f64 / of.max(1) as f64);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            if keyed { "state keys + event times" } else { "every fact added (Mem0)" },
            share(score.current, score.questions),
            share(score.reworded, score.questions),
            share(score.previous, score.previous_questions),
            share(score.before_event, score.previous_questions),
            share(score.when, score.questions),
            share(score.at_time, score.previous_questions),
        );
    }
}

async fn evaluate(embedder: &LocalEmbedder, histories: &[(Vec<Statement>, Vec<Chain>)], keyed: bool) -> Score {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("memories.db")).await.expect("store");
    let history_store = HistoryStore::open(&dir.path().join("history.db")).await.expect("history");
    let memory = Memory::new(Arc::new(store), history_store, Arc::new(embedder.clone())).await.expect("memory");
    let caller = Caller::local_admin("bench");
    let mut score = Score::default();
    for (index, (statements, chains)) in histories.iter().enumerate() {
        let scope = Scope::new(Some(&format!("user-{index}")), None, None).expect("scope");
        let mut ids: std::collections::HashMap<String, Uuid> = std::collections::HashMap::new();
        for statement in statements {
            let request = AddRequest {
                scope: scope.clone(),
                messages: vec![Message { role: "user".into(), content: statement.text.clone(), name: None }],
                infer: false,
                timestamp: Some(statement.told),
                state_key: statement.key.filter(|_| keyed).map(str::to_owned),
                event_time: statement.key.filter(|_| keyed).map(|_| statement.event),
                ..AddRequest::default()
            };
            let added = memory.add(&caller, request).await.expect("add");
            ids.insert(statement.text.clone(), added.results[0].id);
        }
        for chain in chains {
            let current = ids[chain.texts.last().expect("chain")];
            let previous = ids[&chain.texts[chain.texts.len() - 2]];
            let search = |query: String| SearchRequest {
                scope: scope.clone(),
                filter: None,
                query,
                top_k: 5,
                threshold: 0.0,
                show_expired: false,
                include_superseded: false,
                temporal: keyed,
                reference_time: Some(Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).single().expect("time")),
                decay: None,
                mode: SearchMode::Hybrid,
                explain: false,
                rerank: false,
            };
            score.questions += 1;
            score.previous_questions += 1;
            let hits =
                memory.search(&caller, search(chain.attribute.current.to_owned())).await.expect("search").results;
            let reworded =
                memory.search(&caller, search(chain.attribute.reworded.to_owned())).await.expect("search").results;
            if reworded.first().is_some_and(|hit| hit.id == current) {
                score.reworded += 1;
            } else if std::env::var("BENCH_SHOW_MISSES").is_ok() {
                let got = reworded.first().map_or("(nothing)", |hit| hit.memory.as_str());
                println!("miss [{}]: {:?} -> {got:?} (want {:?})", keyed, chain.attribute.reworded, chain.texts.last());
            }
            if hits.first().is_some_and(|hit| hit.id == current) {
                score.current += 1;
            } else if std::env::var("BENCH_SHOW_MISSES").is_ok() {
                let got = hits.first().map_or("(nothing)", |hit| hit.memory.as_str());
                println!("miss [{}]: {:?} -> {got:?} (want {:?})", keyed, chain.attribute.current, chain.texts.last());
            }
            if keyed {
                // The chain answers: the memory the current value superseded.
                let listed = memory
                    .list(
                        &caller,
                        ListRequest {
                            scope: scope.clone(),
                            filter: Some(
                                mem0_core::filter::parse_filter(&serde_json::json!({"state_key": chain.attribute.key}))
                                    .expect("filter"),
                            ),
                            page_size: 100,
                            cursor: None,
                            show_expired: false,
                            include_superseded: true,
                        },
                    )
                    .await
                    .expect("list");
                let head = hits.first().map(|hit| hit.id);
                if listed
                    .items
                    .iter()
                    .any(|item| item.id == previous && item.superseded_by.is_some() && item.superseded_by == head)
                {
                    score.previous += 1;
                }
            } else {
                let hits =
                    memory.search(&caller, search(chain.attribute.previous.to_owned())).await.expect("search").results;
                if hits.first().is_some_and(|hit| hit.id == previous) {
                    score.previous += 1;
                }
            }
            // Before the change: "Where did the user work before Globex?" names the current value;
            // the value true before it took effect is the answer.
            let question = chain
                .attribute
                .previous
                .replace(" before?", &format!(" before {}?", chain.values.last().expect("value")));
            let hits = memory.search(&caller, search(question.clone())).await.expect("search").results;
            if hits.first().is_some_and(|hit| hit.id == previous) {
                score.before_event += 1;
            } else if std::env::var("BENCH_SHOW_MISSES").is_ok() {
                let got = hits.first().map_or("(nothing)", |hit| hit.memory.as_str());
                println!("miss [{keyed}]: {question:?} -> {got:?} (want {:?})", chain.texts[chain.texts.len() - 2]);
            }
            // At a time: a month in the middle of the previous value's validity.
            let (began, ended) = (chain.events[chain.events.len() - 2], chain.events[chain.events.len() - 1]);
            let middle = began + (ended - began) / 2;
            let month = middle.format("%B %Y").to_string();
            let question = chain.attribute.previous.replace(" before?", &format!(" in {month}?"));
            let hits = memory.search(&caller, search(question)).await.expect("search").results;
            if hits.first().is_some_and(|hit| hit.id == previous) {
                score.at_time += 1;
            }
            // When: the memory answering "when did … {current value}" and the time it carries.
            let value = chain.values.last().expect("value");
            let hits = memory
                .search(&caller, search(chain.attribute.when.replace("{v}", value)))
                .await
                .expect("search")
                .results;
            let happened = *chain.events.last().expect("event");
            if hits.first().is_some_and(|hit| hit.id == current && hit.event_time.unwrap_or(hit.created_at) == happened)
            {
                score.when += 1;
            }
        }
    }
    score
}
