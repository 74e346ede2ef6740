//! Crash drills for the write path. A child process (this test binary again) runs one write and
//! aborts itself (`SIGABRT`, like `kill -9`: no destructor, no undo runs) at a named fail point:
//! before the store transaction, after it (history not delivered yet), or after the history
//! volume got the entries (journal not cleared yet). The parent then opens the same stores (a
//! restart: [`Memory::new`] delivers what the journal holds) and checks, on both stores, that
//! every memory has its history, that no history entry describes a change that did not happen,
//! that buffered conversation messages arrived exactly once, and that the journal is empty. With
//! the history on Postgres (`Backend::Postgres`) there is no delivery step: the drills stop the
//! process before and after the one transaction, and the same invariants hold.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::sync::Arc;

use mem0_core::history::HistoryStore;
use mem0_core::providers::embedder::{Embedder, LocalEmbedder};
use mem0_core::providers::llm::{Llm, OpenAiLlm, OpenAiLlmConfig};
use mem0_core::store::{PgVectorConfig, PgVectorStore, SqliteStore, VectorStore};
use mem0_core::{
    AddRequest, Caller, ExtractionSettings, HistoryEvent, ListRequest, Memory, Message, Scope, UpdateRequest,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

mod common;
use common::{cancel_after, PgDatabase};

const CHILD_ENV: &str = "MEM0_CRASH_DRILL";
const TENANT: &str = "drill";
const VERBATIM: &str = "Crash drill: I keep bees in the garden";
const EXTRACTED: &str = "User keeps bees in the garden";
const UPDATED: &str = "Crash drill: the bees moved to the roof";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Backend {
    /// SQLite store, SQLite history volume.
    Sqlite,
    /// pgvector store, SQLite history volume.
    Pgvector,
    /// pgvector store, history in the same database (`history.provider = "postgres"`).
    Postgres,
}

impl Backend {
    const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Pgvector, Backend::Postgres];

    fn on_postgres(self) -> bool {
        self != Backend::Sqlite
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Operation {
    Add,
    AddInferred,
    Update,
    Delete,
    DeleteAll,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Drill {
    backend: Backend,
    data_dir: PathBuf,
    pg_url: Option<String>,
    operation: Operation,
    step: String,
    target: Option<Uuid>,
}

fn caller() -> Caller {
    Caller::local_admin(TENANT)
}

fn scope() -> Scope {
    Scope::new(Some("keeper"), None, None).expect("scope")
}

async fn embedder() -> Arc<dyn Embedder> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2"));
    let loaded = tokio::task::spawn_blocking(move || LocalEmbedder::load(&dir))
        .await
        .expect("model loading task")
        .unwrap_or_else(|error| panic!("{error} (run scripts/fetch-model.sh)"));
    Arc::new(loaded)
}

async fn open(drill: &Drill) -> (Memory, Arc<dyn VectorStore>, HistoryStore) {
    let volume_path = drill.data_dir.join("history.db");
    let volume = || HistoryStore::open(&volume_path);
    let (store, history): (Arc<dyn VectorStore>, HistoryStore) = match drill.backend {
        Backend::Sqlite => (
            Arc::new(SqliteStore::open(&drill.data_dir.join("memories.db")).await.expect("sqlite")),
            volume().await.expect("history"),
        ),
        Backend::Pgvector | Backend::Postgres => {
            let store = PgVectorStore::connect(drill.pg_url.as_deref().expect("url"), &PgVectorConfig::default())
                .await
                .expect("postgres");
            let history = if drill.backend == Backend::Postgres {
                HistoryStore::in_postgres(&store)
            } else {
                volume().await.expect("history")
            };
            (Arc::new(store), history)
        }
    };
    let memory = Memory::new(Arc::clone(&store), history.clone(), embedder().await).await.expect("memory");
    // What the server does at startup.
    memory.recover(std::time::Duration::ZERO).await.expect("recover");
    (memory, store, history)
}

fn verbatim(text: &str) -> AddRequest {
    AddRequest {
        scope: scope(),
        messages: vec![Message { role: "user".into(), content: text.into(), name: None }],
        infer: false,
        ..AddRequest::default()
    }
}

/// The child: one write, aborted at the drill's step. Run only by `crash_drills`.
#[tokio::test]
#[ignore = "the child process of crash_drills; it aborts on purpose"]
async fn crash_child() {
    let spec = std::env::var(CHILD_ENV).expect("run by crash_drills, which sets MEM0_CRASH_DRILL");
    let drill: Drill = serde_json::from_str(&spec).expect("drill");
    let (memory, _, _) = open(&drill).await;
    let step = drill.step.clone();
    let memory = memory.with_fail_point(Arc::new(move |reached| {
        if reached == step {
            std::process::abort();
        }
    }));
    let caller = caller();
    match drill.operation {
        Operation::Add => drop(memory.add(&caller, verbatim(VERBATIM)).await.expect("add")),
        Operation::AddInferred => {
            let (_server, llm) = fake_llm(json!({"facts": [{"text": EXTRACTED, "entities": ["garden"]}]})).await;
            let memory = memory.with_llm(Some(llm), ExtractionSettings::default());
            let request = AddRequest {
                scope: scope(),
                messages: vec![
                    Message { role: "user".into(), content: "I keep bees in the garden".into(), name: None },
                    Message { role: "assistant".into(), content: "Lovely, honey!".into(), name: None },
                ],
                infer: true,
                ..AddRequest::default()
            };
            drop(memory.add(&caller, request).await.expect("add"));
        }
        Operation::Update => {
            let request = UpdateRequest { text: Some(UPDATED.into()), ..UpdateRequest::default() };
            drop(memory.update(&caller, drill.target.expect("target"), request).await.expect("update"));
        }
        Operation::Delete => memory.delete(&caller, drill.target.expect("target")).await.expect("delete"),
        Operation::DeleteAll => drop(memory.delete_all(&caller, scope()).await.expect("delete all")),
    }
    panic!("the fail point {} was never reached", drill.step);
}

async fn listed(memory: &Memory) -> Vec<mem0_core::MemoryItem> {
    let request = ListRequest {
        scope: scope(),
        filter: None,
        page_size: 1000,
        cursor: None,
        show_expired: true,
        include_superseded: true,
    };
    memory.list(&caller(), request).await.expect("list").items
}

async fn events(memory: &Memory, id: Uuid) -> Vec<HistoryEvent> {
    match memory.history(&caller(), id).await {
        Ok(entries) => entries.iter().map(|entry| entry.event).collect(),
        Err(mem0_core::Error::MemoryNotFound { .. }) => Vec::new(),
        Err(error) => panic!("history: {error}"),
    }
}

async fn drill(backend: Backend, operation: Operation, step: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let database = if backend.on_postgres() { Some(PgDatabase::create().await) } else { None };
    let mut drill = Drill {
        backend,
        data_dir: dir.path().to_path_buf(),
        pg_url: database.as_ref().map(PgDatabase::url),
        operation,
        step: step.to_owned(),
        target: None,
    };
    let label = format!("{backend:?} {operation:?} at {step}");
    // Seed three memories, then close everything before the child runs.
    let seeded: Vec<Uuid> = {
        let (memory, _, _) = open(&drill).await;
        let mut ids = Vec::new();
        for text in ["Seed: the hive is blue", "Seed: the queen is marked", "Seed: honey in August"] {
            ids.extend(memory.add(&caller(), verbatim(text)).await.expect("seed").results.iter().map(|added| added.id));
        }
        ids
    };
    drill.target = Some(seeded[0]);
    let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["crash_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, serde_json::to_string(&drill).expect("spec"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run the child");
    assert_eq!(status.signal(), Some(6), "{label}: the child must abort at the fail point, got {status:?}");

    // Restart: opening the service delivers what the journal holds.
    let (memory, store, history) = open(&drill).await;
    let far = chrono::Utc::now() + chrono::Duration::days(1);
    assert!(store.journal(far, 10).await.expect("journal").is_empty(), "{label}: the journal was delivered");
    let memories = listed(&memory).await;
    for item in &memories {
        let events = events(&memory, item.id).await;
        assert_eq!(events.first(), Some(&HistoryEvent::Add), "{label}: {} has its ADD: {events:?}", item.memory);
        assert!(!events.contains(&HistoryEvent::Delete), "{label}: a live memory has no DELETE: {events:?}");
    }
    let texts: Vec<&str> = memories.iter().map(|item| item.memory.as_str()).collect();
    let committed = step != "write.before_commit";
    match operation {
        Operation::Add => assert_eq!(texts.contains(&VERBATIM), committed, "{label}: {texts:?}"),
        Operation::AddInferred => {
            assert_eq!(texts.contains(&EXTRACTED), committed, "{label}: {texts:?}");
            let session = mem0_core::extraction::session_scope(&scope());
            let buffered = history.recent_messages(TENANT, &session, 10).await.expect("buffer");
            assert_eq!(buffered.len(), if committed { 2 } else { 0 }, "{label}: buffered once: {buffered:?}");
        }
        Operation::Update => {
            let target = memories.iter().find(|item| item.id == seeded[0]).expect("target still there");
            let events = events(&memory, seeded[0]).await;
            if committed {
                assert_eq!(target.memory, UPDATED, "{label}");
                assert_eq!(events, [HistoryEvent::Add, HistoryEvent::Update], "{label}");
            } else {
                assert_eq!(events, [HistoryEvent::Add], "{label}");
            }
        }
        Operation::Delete => {
            assert_eq!(!memories.iter().any(|item| item.id == seeded[0]), committed, "{label}");
            let expected: &[HistoryEvent] =
                if committed { &[HistoryEvent::Add, HistoryEvent::Delete] } else { &[HistoryEvent::Add] };
            assert_eq!(events(&memory, seeded[0]).await, expected, "{label}");
        }
        Operation::DeleteAll => {
            assert_eq!(memories.is_empty(), committed, "{label}: {texts:?}");
            for id in &seeded {
                let last = events(&memory, *id).await.last().copied();
                assert_eq!(last == Some(HistoryEvent::Delete), committed, "{label}");
            }
        }
    }
    // Seeds that were not touched keep exactly their ADD.
    for id in &seeded[1..] {
        if operation != Operation::DeleteAll {
            assert_eq!(events(&memory, *id).await, [HistoryEvent::Add], "{label}");
        }
    }
    drop((memory, store, history, database));
}

#[tokio::test]
async fn crash_drills() {
    let operations =
        [Operation::Add, Operation::AddInferred, Operation::Update, Operation::Delete, Operation::DeleteAll];
    for backend in Backend::ALL {
        // History on Postgres has no delivery step: it commits with the change.
        let after = if backend == Backend::Postgres {
            &["write.after_commit"][..]
        } else {
            &["write.after_commit", "write.after_delivery"]
        };
        for operation in operations {
            for step in after {
                drill(backend, operation, step).await;
            }
        }
        for operation in [Operation::Add, Operation::Delete] {
            drill(backend, operation, "write.before_commit").await;
        }
    }
}

/// An OpenAI-compatible chat server (wiremock) whose every reply is `facts`, and the real client
/// pointed at it; keep the server alive while the client is used.
async fn fake_llm(facts: serde_json::Value) -> (wiremock::MockServer, Arc<dyn Llm>) {
    use wiremock::matchers::{method, path};
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": facts.to_string()}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}
        })))
        .mount(&server)
        .await;
    let config = OpenAiLlmConfig {
        base_url: Some(format!("{}/v1", server.uri())),
        api_key: Some("sk-drill".to_owned().into()),
        model: "fake-chat".to_owned(),
        ..OpenAiLlmConfig::default()
    };
    let llm: Arc<dyn Llm> = Arc::new(OpenAiLlm::new(config).expect("llm"));
    (server, llm)
}

/// Writes whose caller gives up half-way still finish as a whole: each runs on its own task, so
/// no cancellation lands between the store transaction and the history (which would leave the
/// change's history in the journal until the next restart).
#[tokio::test]
async fn abandoned_writes_finish_with_their_history() {
    for backend in Backend::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        let database = if backend.on_postgres() { Some(PgDatabase::create().await) } else { None };
        let drill = Drill {
            backend,
            data_dir: dir.path().to_path_buf(),
            pg_url: database.as_ref().map(PgDatabase::url),
            operation: Operation::Add,
            step: String::new(),
            target: None,
        };
        let (memory, store, _history) = open(&drill).await;
        let caller = caller();
        let seed = memory.add(&caller, verbatim("Seed: updated and deleted below")).await.expect("seed");
        let target = seed.results[0].id;
        for polls in 1..=300 {
            match polls % 3 {
                0 => cancel_after(memory.add(&caller, verbatim(&format!("abandoned add {polls}"))), polls).await,
                1 => {
                    let request =
                        UpdateRequest { text: Some(format!("abandoned update {polls}")), ..UpdateRequest::default() };
                    cancel_after(memory.update(&caller, target, request), polls).await;
                }
                _ => {
                    let id =
                        memory.add(&caller, verbatim(&format!("doomed {polls}"))).await.expect("add").results[0].id;
                    cancel_after(memory.delete(&caller, id), polls).await;
                }
            }
        }
        // The abandoned writes that reached their commit finish on their own tasks.
        for _ in 0..1000 {
            if memory.writes_in_flight() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(memory.writes_in_flight(), 0, "{backend:?}: the abandoned writes finished");
        let far = chrono::Utc::now() + chrono::Duration::days(1);
        assert!(
            store.journal(far, 1).await.expect("journal").is_empty(),
            "{backend:?}: every write delivered its history"
        );
        for item in listed(&memory).await {
            assert_eq!(
                events(&memory, item.id).await.first(),
                Some(&HistoryEvent::Add),
                "{backend:?}: {}",
                item.memory
            );
        }
        let target_events = events(&memory, target).await;
        let current = memory.get(&caller, target).await.expect("target").memory;
        let updates = target_events.iter().filter(|event| **event == HistoryEvent::Update).count();
        assert_eq!(updates > 0, current != "Seed: updated and deleted below", "{backend:?}: {target_events:?}");
        drop((memory, store, database));
    }
}

/// A message batch delivered twice (a crash after delivery, then recovery) adds nothing, even
/// when newer messages have trimmed it out of the buffer meanwhile.
#[tokio::test]
async fn redelivered_message_batches_add_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let volume = HistoryStore::open(&dir.path().join("history.db")).await.expect("history");
    redelivered_batches_add_nothing_on(&volume).await;
    let database = PgDatabase::create().await;
    let store = PgVectorStore::connect(&database.url(), &PgVectorConfig::default()).await.expect("postgres");
    redelivered_batches_add_nothing_on(&HistoryStore::in_postgres(&store)).await;
}

async fn redelivered_batches_add_nothing_on(history: &HistoryStore) {
    use mem0_core::history::BufferedMessages;
    let batch = |count: usize, said: &str| BufferedMessages {
        id: Uuid::now_v7(),
        tenant: TENANT.to_owned(),
        session: "user_id=keeper".to_owned(),
        at: chrono::Utc::now(),
        messages: (0..count)
            .map(|index| Message { role: "user".into(), content: format!("{said} {index}"), name: None })
            .collect(),
    };
    let old = batch(3, "old");
    history.deliver(&[], std::slice::from_ref(&old)).await.expect("deliver");
    let new = batch(mem0_core::history::BUFFER_KEEP, "new");
    history.deliver(&[], std::slice::from_ref(&new)).await.expect("deliver");
    history.deliver(&[], std::slice::from_ref(&old)).await.expect("deliver again");
    let recent = history.recent_messages(TENANT, "user_id=keeper", 5).await.expect("recent");
    let texts: Vec<&str> = recent.iter().map(|message| message.content.as_str()).collect();
    assert_eq!(texts, ["new 45", "new 46", "new 47", "new 48", "new 49"], "the old batch did not come back");
}

/// `delete_all` of a scope also removes that scope's buffered messages still waiting in the
/// journal (a write interrupted after its store transaction), so recovery cannot bring raw user
/// text back after the user was deleted.
#[tokio::test]
async fn delete_all_forgets_messages_waiting_in_the_journal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let drill = Drill {
        backend: Backend::Sqlite,
        data_dir: dir.path().to_path_buf(),
        pg_url: None,
        operation: Operation::AddInferred,
        step: String::new(),
        target: None,
    };
    let (memory, store, history) = open(&drill).await;
    let (_server, llm) = fake_llm(json!({"facts": [{"text": EXTRACTED}]})).await;
    // The write stops right after its store transaction (the task panics there).
    let interrupted = memory
        .clone()
        .with_llm(Some(llm), ExtractionSettings::default())
        .with_fail_point(Arc::new(|step| assert_ne!(step, "write.after_commit", "interrupted")));
    let request = AddRequest {
        scope: scope(),
        messages: vec![Message { role: "user".into(), content: "my secret diary entry".into(), name: None }],
        infer: true,
        ..AddRequest::default()
    };
    assert!(interrupted.add(&caller(), request).await.is_err(), "the write was interrupted");
    let far = chrono::Utc::now() + chrono::Duration::days(1);
    assert!(!store.journal(far, 10).await.expect("journal").is_empty(), "its history waits in the journal");
    memory.delete_all(&caller(), scope()).await.expect("delete the user");
    memory.recover(std::time::Duration::ZERO).await.expect("recover");
    let session = mem0_core::extraction::session_scope(&scope());
    let buffered = history.recent_messages(TENANT, &session, 10).await.expect("buffer");
    assert!(buffered.is_empty(), "the deleted user's words stay deleted: {buffered:?}");
    assert!(listed(&memory).await.is_empty());
}
