//! One suite, both history providers: the SQLite history volume and the history in the Postgres
//! database of the store (`memory.history.provider = "postgres"`). History entries, the
//! conversation buffer (under concurrent writers from two handles, as two replicas would be),
//! API keys seen by another handle on the same database, the request log, the audit trail,
//! stored settings, queued adds, webhooks and the LLM token counters.

use std::sync::Arc;

use chrono::Utc;
use mem0_core::api_keys::NewApiKey;
use mem0_core::history::{
    AuditAction, AuditEntry, AuditQuery, BufferedMessages, HistoryStore, RequestLogEntry, BUFFER_KEEP,
};
use mem0_core::store::{PgVectorConfig, PgVectorStore};
use mem0_core::types::{HistoryEvent, HistoryRecord, MemoryRecord};
use mem0_core::{Caller, Message, Role, Scope, ScopeGrant};
use uuid::Uuid;

mod common;
use common::PgDatabase;

/// Two handles on one history database (two replicas, or a restart), and what keeps it alive.
struct Provider {
    name: &'static str,
    first: HistoryStore,
    second: HistoryStore,
    _keep: Box<dyn std::any::Any>,
}

async fn providers() -> Vec<Provider> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("history.db");
    let sqlite = Provider {
        name: "sqlite",
        first: HistoryStore::open(&path).await.expect("history volume"),
        second: HistoryStore::open(&path).await.expect("history volume again"),
        _keep: Box::new(dir),
    };
    let database = PgDatabase::create().await;
    let config = PgVectorConfig { max_connections: 8, ..PgVectorConfig::default() };
    let one = PgVectorStore::connect(&database.url(), &config).await.expect("postgres");
    let two = PgVectorStore::connect(&database.url(), &config).await.expect("postgres again");
    let postgres = Provider {
        name: "postgres",
        first: HistoryStore::in_postgres(&one),
        second: HistoryStore::in_postgres(&two),
        _keep: Box::new((database, one, two)),
    };
    vec![sqlite, postgres]
}

fn batch(tenant: &str, session: &str, said: &str, count: usize) -> BufferedMessages {
    BufferedMessages {
        id: Uuid::now_v7(),
        tenant: tenant.to_owned(),
        session: session.to_owned(),
        at: Utc::now(),
        messages: (0..count)
            .map(|index| Message { role: "user".into(), content: format!("{said} {index}"), name: None })
            .collect(),
    }
}

fn record(tenant: &str, text: &str) -> MemoryRecord {
    let scope = Scope::new(Some("u_1"), None, None).expect("scope");
    let mut record = MemoryRecord::new(tenant, scope, text.to_owned(), vec![0.0; 4], Utc::now());
    record.actor_id = Some("Ann".into());
    record
}

#[tokio::test]
async fn history_entries_round_trip_and_delivery_is_idempotent() {
    for provider in providers().await {
        let name = provider.name;
        let memory = record("t1", "Likes tea");
        let now = Utc::now();
        let add = HistoryRecord::for_event(&memory, HistoryEvent::Add, None, now);
        let mut changed = memory.clone();
        changed.memory = "Likes green tea".into();
        let update = HistoryRecord::for_event(
            &changed,
            HistoryEvent::Update,
            Some(memory.memory.clone()),
            now + chrono::Duration::seconds(1),
        );
        provider.first.deliver(&[add.clone(), update.clone()], &[]).await.expect("deliver");
        // Delivered again (recovery after a crash): nothing doubles.
        provider.second.deliver(std::slice::from_ref(&add), &[]).await.expect("deliver again");
        let entries = provider.second.for_memory("t1", memory.id).await.expect("read");
        let events: Vec<HistoryEvent> = entries.iter().map(|entry| entry.event).collect();
        assert_eq!(events, [HistoryEvent::Add, HistoryEvent::Update], "{name}");
        assert_eq!(entries[1].old_memory.as_deref(), Some("Likes tea"), "{name}");
        assert_eq!(entries[1].new_memory.as_deref(), Some("Likes green tea"), "{name}");
        assert_eq!(entries[0].scope, memory.scope, "{name}");
        assert_eq!(entries[0].actor_id.as_deref(), Some("Ann"), "{name}");
        assert_eq!(entries[0].created_at.timestamp_micros(), now.timestamp_micros(), "{name}");
        assert!(provider.first.for_memory("t2", memory.id).await.expect("read").is_empty(), "{name}: other tenant");
        provider.first.reset(Some("t1")).await.expect("reset");
        assert!(provider.second.for_memory("t1", memory.id).await.expect("read").is_empty(), "{name}");
    }
}

#[tokio::test]
async fn concurrent_buffering_of_one_session_keeps_every_message_in_order() {
    for provider in providers().await {
        let name = provider.name;
        let (first, second) = (Arc::new(provider.first.clone()), Arc::new(provider.second.clone()));
        // 16 writers over two handles, 2 messages each, into one session.
        let mut tasks = Vec::new();
        for writer in 0..16 {
            let history = if writer % 2 == 0 { Arc::clone(&first) } else { Arc::clone(&second) };
            tasks.push(tokio::spawn(async move {
                let turn = batch("t1", "user_id=u_1", &format!("w{writer}"), 2);
                history.deliver(&[], &[turn]).await.expect("deliver");
            }));
        }
        for task in tasks {
            task.await.expect("writer");
        }
        let recent = first.recent_messages("t1", "user_id=u_1", BUFFER_KEEP).await.expect("recent");
        assert_eq!(recent.len(), 32, "{name}: every message kept");
        // Each batch's two messages are adjacent and in order: no two writers took the same seq.
        for pair in recent.chunks(2) {
            let stem = pair[0].content.trim_end_matches(" 0");
            assert_eq!(pair[1].content, format!("{stem} 1"), "{name}: {recent:?}");
        }
        // Trimmed to the newest BUFFER_KEEP.
        second.deliver(&[], &[batch("t1", "user_id=u_1", "late", BUFFER_KEEP)]).await.expect("deliver");
        let recent = first.recent_messages("t1", "user_id=u_1", 1000).await.expect("recent");
        assert_eq!(recent.len(), BUFFER_KEEP, "{name}");
        assert!(recent.iter().all(|message| message.content.starts_with("late")), "{name}");
    }
}

#[tokio::test]
async fn forgetting_sessions_matches_ids_exactly() {
    for provider in providers().await {
        let name = provider.name;
        let history = &provider.first;
        for session in ["user_id=a_b", "user_id=aXb", "user_id=A_B", "agent_id=x&user_id=a_b"] {
            history.deliver(&[], &[batch("t1", session, session, 1)]).await.expect("deliver");
        }
        history.deliver(&[], &[batch("t2", "user_id=a_b", "other tenant", 1)]).await.expect("deliver");
        let scope = Scope::new(Some("a_b"), None, None).expect("scope");
        provider.second.forget_sessions("t1", &scope).await.expect("forget");
        let left = |tenant: &'static str, session: &'static str| async move {
            history.recent_messages(tenant, session, 10).await.expect("recent").len()
        };
        assert_eq!(left("t1", "user_id=a_b").await, 0, "{name}");
        assert_eq!(left("t1", "agent_id=x&user_id=a_b").await, 0, "{name}: every session of the user");
        assert_eq!(left("t1", "user_id=aXb").await, 1, "{name}: `_` is no wildcard");
        assert_eq!(left("t1", "user_id=A_B").await, 1, "{name}: ids are case-sensitive");
        assert_eq!(left("t2", "user_id=a_b").await, 1, "{name}: other tenant untouched");
    }
}

#[tokio::test]
async fn api_keys_created_on_one_handle_work_on_the_other() {
    for provider in providers().await {
        let name = provider.name;
        let admin = Caller::local_admin("t1");
        let new = NewApiKey {
            tenant: Some("t2".into()),
            label: "replica test".into(),
            role: Role::Write,
            grant: ScopeGrant { user_ids: Some(vec!["u_1".into()]), agent_ids: None },
        };
        let created = provider.first.api_keys().create(&admin, new).await.expect("create");
        let caller = provider.second.api_keys().authenticate(&created.key).await.expect("auth").expect("known key");
        assert_eq!((caller.tenant.as_str(), caller.role), ("t2", Role::Write), "{name}");
        assert_eq!(caller.grant.user_ids.as_deref(), Some(&["u_1".to_owned()][..]), "{name}");
        let listed = provider.second.api_keys().list(&admin).await.expect("list");
        let info = listed.iter().find(|info| info.id == created.info.id).expect("listed");
        assert!(info.last_used_at.is_some(), "{name}: use recorded");
        let tenant_admin = Caller { global_admin: false, ..Caller::local_admin("t1") };
        assert!(
            provider.first.api_keys().list(&tenant_admin).await.expect("list").is_empty(),
            "{name}: other tenant's"
        );
        provider.second.api_keys().revoke(&admin, created.info.id).await.expect("revoke");
        assert!(provider.first.api_keys().authenticate(&created.key).await.expect("auth").is_none(), "{name}");
        let wrong = format!("{}x", &created.key[..created.key.len() - 1]);
        assert!(provider.first.api_keys().authenticate(&wrong).await.expect("auth").is_none(), "{name}");
    }
}

#[tokio::test]
async fn the_request_log_pages_filters_and_prunes() {
    for provider in providers().await {
        let name = provider.name;
        let entry = |minutes_ago: i64, tenant: Option<&str>, principal: &str| RequestLogEntry {
            id: 0,
            at: Utc::now() - chrono::Duration::minutes(minutes_ago),
            method: "GET".into(),
            route: "/memories/{memory_id}".into(),
            status: 200,
            latency_ms: 1.5,
            principal_id: Some(principal.into()),
            tenant: tenant.map(str::to_owned),
        };
        let entries = [
            entry(90, Some("t1"), "key:a"),
            entry(5, Some("t1"), "key:b"),
            entry(4, Some("t2"), "key:a"),
            entry(3, None, "admin"),
        ];
        provider.first.request_log().append(&entries).await.expect("append");
        let log = provider.second.request_log();
        let all = log.recent(None, None, None, 10).await.expect("recent");
        assert_eq!(all.len(), 4, "{name}");
        assert!(all.windows(2).all(|pair| pair[0].id > pair[1].id), "{name}: newest first");
        assert_eq!(all[0].route, "/memories/{memory_id}", "{name}");
        assert!((all[0].latency_ms - 1.5).abs() < 1e-9, "{name}");
        let t1 = log.recent(Some("t1"), None, None, 10).await.expect("recent");
        assert_eq!(t1.len(), 2, "{name}");
        let page = log.recent(Some("t1"), None, Some(t1[0].id), 10).await.expect("recent");
        assert_eq!(page, t1[1..], "{name}: paged");
        let key_a = log.recent(None, Some(&["key:a".to_owned()]), None, 10).await.expect("recent");
        assert_eq!(key_a.len(), 2, "{name}");
        assert!(log.recent(None, Some(&[]), None, 10).await.expect("recent").is_empty(), "{name}");
        let pruned = log.prune(Utc::now() - chrono::Duration::minutes(60)).await.expect("prune");
        assert_eq!(pruned, 1, "{name}");
    }
}

#[tokio::test]
async fn the_audit_trail_filters_pages_survives_a_reset_and_prunes() {
    for provider in providers().await {
        let name = provider.name;
        let (tea, bees) = (Uuid::now_v7(), Uuid::now_v7());
        let entry =
            |minutes_ago: i64, tenant: &str, principal: &str, action: AuditAction, memory: Option<Uuid>| AuditEntry {
                id: 0,
                at: Utc::now() - chrono::Duration::minutes(minutes_ago),
                tenant: tenant.to_owned(),
                principal_id: principal.to_owned(),
                action,
                memory_id: memory.map(|id| id.to_string()),
                request_id: Some(format!("req-{minutes_ago}")),
                detail: None,
            };
        let entries = [
            entry(90, "t1", "key:a", AuditAction::Add, Some(tea)),
            entry(50, "t1", "key:b", AuditAction::SearchHit, Some(tea)),
            entry(40, "t1", "key:b", AuditAction::SearchHit, Some(bees)),
            entry(30, "t2", "key:a", AuditAction::Get, Some(tea)),
            entry(20, "t1", "jwt:ann", AuditAction::PolicyReject, None),
        ];
        provider.first.audit_log().append(&entries).await.expect("append");
        let log = provider.second.audit_log();
        let read = |query: AuditQuery| {
            let log = log.clone();
            async move {
                log.query(&AuditQuery { limit: if query.limit == 0 { 10 } else { query.limit }, ..query })
                    .await
                    .expect("query")
            }
        };
        let all = read(AuditQuery::default()).await;
        assert_eq!(all.len(), 5, "{name}");
        assert!(all.windows(2).all(|pair| pair[0].id > pair[1].id), "{name}: newest first");
        assert_eq!(all[0].action, AuditAction::PolicyReject, "{name}");
        assert_eq!(all[4].request_id.as_deref(), Some("req-90"), "{name}");
        let t1 = read(AuditQuery { tenant: Some("t1".into()), ..AuditQuery::default() }).await;
        assert_eq!(t1.len(), 4, "{name}");
        let about_tea = read(AuditQuery { memory_id: Some(tea), ..AuditQuery::default() }).await;
        assert_eq!(about_tea.len(), 3, "{name}");
        let tea_in_t1 =
            read(AuditQuery { tenant: Some("t1".into()), memory_id: Some(tea), ..AuditQuery::default() }).await;
        assert_eq!(tea_in_t1.len(), 2, "{name}");
        let hits =
            read(AuditQuery { actions: Some(vec![AuditAction::SearchHit, AuditAction::Get]), ..AuditQuery::default() })
                .await;
        assert_eq!(hits.len(), 3, "{name}");
        let of_b = read(AuditQuery { principals: Some(vec!["key:b".into()]), ..AuditQuery::default() }).await;
        assert_eq!(of_b.len(), 2, "{name}");
        assert!(read(AuditQuery { principals: Some(Vec::new()), ..AuditQuery::default() }).await.is_empty(), "{name}");
        assert!(read(AuditQuery { actions: Some(Vec::new()), ..AuditQuery::default() }).await.is_empty(), "{name}");
        let window = read(AuditQuery {
            since: Some(Utc::now() - chrono::Duration::minutes(45)),
            until: Some(Utc::now() - chrono::Duration::minutes(25)),
            ..AuditQuery::default()
        })
        .await;
        assert_eq!(
            window.iter().map(|entry| entry.action).collect::<Vec<_>>(),
            [AuditAction::Get, AuditAction::SearchHit],
            "{name}"
        );
        let page = read(AuditQuery { before: Some(all[1].id), limit: 2, ..AuditQuery::default() }).await;
        assert_eq!(page, all[2..4], "{name}: paged");
        // A reset of the tenant's memories and history leaves the trail.
        provider.first.reset(Some("t1")).await.expect("reset");
        assert_eq!(read(AuditQuery::default()).await.len(), 5, "{name}");
        let pruned = log.prune(Utc::now() - chrono::Duration::minutes(60)).await.expect("prune");
        assert_eq!(pruned, 1, "{name}");
        assert_eq!(read(AuditQuery::default()).await.len(), 4, "{name}");
        // A busy server's batch: more rows than one multi-row statement holds, all kept in order.
        let many: Vec<AuditEntry> = (0..451)
            .map(|index| AuditEntry {
                detail: Some(format!("row {index}")),
                ..entry(10, "t3", "key:busy", AuditAction::SearchHit, Some(Uuid::now_v7()))
            })
            .collect();
        provider.first.audit_log().append(&many).await.expect("append many");
        let busy = read(AuditQuery { tenant: Some("t3".into()), limit: 500, ..AuditQuery::default() }).await;
        assert_eq!(busy.len(), 451, "{name}");
        assert_eq!(busy[0].detail.as_deref(), Some("row 450"), "{name}: newest first");
        assert_eq!(busy[450].detail.as_deref(), Some("row 0"), "{name}");
        assert_eq!(busy[450].memory_id, many[0].memory_id, "{name}");
    }
}

#[tokio::test]
async fn settings_are_shared_and_versioned() {
    for provider in providers().await {
        let name = provider.name;
        assert_eq!(provider.first.setting("runtime").await.expect("read"), None, "{name}");
        let one = provider.first.save_setting("runtime", r#"{"llm":{}}"#).await.expect("save");
        let two = provider.second.save_setting("runtime", r#"{"llm":{"provider":"openai"}}"#).await.expect("save");
        assert!(two > one, "{name}: versions grow");
        let stored = provider.first.setting("runtime").await.expect("read").expect("stored");
        assert_eq!((stored.value.as_str(), stored.version), (r#"{"llm":{"provider":"openai"}}"#, two), "{name}");
    }
}

/// History on Postgres is committed by the store with the change it describes: a write that
/// fails writes neither; one that succeeds writes both (entries of skipped delete targets left
/// out). The SQLite store, whose history lives in the volume, refuses such a write.
#[tokio::test]
async fn history_in_the_store_commits_with_the_change_or_not_at_all() {
    use mem0_core::store::{MemoryRows as _, VectorIndex as _, WriteSet};
    let database = PgDatabase::create().await;
    let store = PgVectorStore::connect(&database.url(), &PgVectorConfig::default()).await.expect("postgres");
    store.ensure_dimension(4, "test").await.expect("dimension");
    let history = HistoryStore::in_postgres(&store);
    let fresh = record("t1", "Plays chess");
    let added = HistoryRecord::for_event(&fresh, HistoryEvent::Add, None, Utc::now());
    let said = batch("t1", "user_id=u_1", "said", 2);
    let missing = record("t1", "Never stored");
    let failing = WriteSet {
        tenant: "t1".into(),
        insert: vec![fresh.clone()],
        update: vec![missing.clone()],
        history: vec![added.clone()],
        messages: vec![said.clone()],
        ..WriteSet::default()
    };
    assert!(store.apply(&failing).await.is_err(), "an update of a missing row fails the write");
    assert!(history.for_memory("t1", fresh.id).await.expect("read").is_empty(), "no history without its change");
    assert!(history.recent_messages("t1", "user_id=u_1", 10).await.expect("read").is_empty(), "no messages either");

    let gone = HistoryRecord::for_event(&missing, HistoryEvent::Delete, None, Utc::now());
    let write = WriteSet {
        tenant: "t1".into(),
        insert: vec![fresh.clone()],
        delete: vec![missing.id],
        skip_missing: true,
        history: vec![added, gone],
        messages: vec![said],
        ..WriteSet::default()
    };
    store.apply(&write).await.expect("apply");
    let events: Vec<HistoryEvent> =
        history.for_memory("t1", fresh.id).await.expect("read").iter().map(|entry| entry.event).collect();
    assert_eq!(events, [HistoryEvent::Add]);
    assert!(history.for_memory("t1", missing.id).await.expect("read").is_empty(), "no DELETE of nothing");
    assert_eq!(history.recent_messages("t1", "user_id=u_1", 10).await.expect("read").len(), 2);

    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = mem0_core::store::SqliteStore::open(&dir.path().join("memories.db")).await.expect("sqlite");
    let other = record("t1", "Elsewhere");
    let refused = WriteSet {
        insert: vec![other.clone()],
        history: vec![HistoryRecord::for_event(&other, HistoryEvent::Add, None, Utc::now())],
        ..WriteSet::default()
    };
    assert!(sqlite.apply(&refused).await.is_err(), "the SQLite store keeps no history");
    assert!(sqlite.get("t1", other.id).await.expect("get").is_none(), "and writes nothing");
}

#[tokio::test]
async fn idempotency_keys_are_claimed_once_replayed_and_expire() {
    use mem0_core::history::{Claim, StoredResponse};
    for provider in providers().await {
        let name = provider.name;
        let (one, two) = (provider.first.idempotency(), provider.second.idempotency());
        let now = Utc::now();
        let stale = chrono::Duration::minutes(5);
        // 16 claims at once over two handles: exactly one runs.
        let claims = (0..16).map(|index| {
            let keys = if index % 2 == 0 { one.clone() } else { two.clone() };
            async move { keys.claim("t1", "k1", "f1", now, stale).await.expect("claim") }
        });
        let claims = futures::future::join_all(claims).await;
        assert_eq!(claims.iter().filter(|claim| **claim == Claim::Run).count(), 1, "{name}: {claims:?}");
        assert!(claims.iter().all(|claim| matches!(claim, Claim::Run | Claim::InProgress)), "{name}");
        assert_eq!(two.claim("t1", "k1", "other", now, stale).await.expect("claim"), Claim::Mismatch, "{name}");
        assert_eq!(two.claim("t2", "k1", "other", now, stale).await.expect("claim"), Claim::Run, "{name}: per tenant");
        let response = StoredResponse { status: 200, body: br#"{"results":[]}"#.to_vec() };
        one.complete("t1", "k1", &response).await.expect("complete");
        assert_eq!(two.claim("t1", "k1", "f1", now, stale).await.expect("claim"), Claim::Replay(response), "{name}");
        // Released (the request failed): the next claim runs.
        one.claim("t1", "k2", "f2", now, stale).await.expect("claim");
        one.release("t1", "k2").await.expect("release");
        assert_eq!(two.claim("t1", "k2", "f2", now, stale).await.expect("claim"), Claim::Run, "{name}");
        // Still running after `stale` (its server died): the same request takes it over.
        let later = now + chrono::Duration::minutes(6);
        assert_eq!(two.claim("t1", "k2", "f2", later, stale).await.expect("claim"), Claim::Run, "{name}");
        // After 24 hours a key is free for anything.
        let tomorrow = now + chrono::Duration::hours(25);
        assert_eq!(two.claim("t1", "k1", "new", tomorrow, stale).await.expect("claim"), Claim::Run, "{name}");
        // Pruned a day after their (last) claim: t1/k2 and t2/k1 now, t1/k1 (claimed again) later.
        assert_eq!(one.prune(tomorrow + chrono::Duration::hours(1)).await.expect("prune"), 2, "{name}");
        assert_eq!(one.prune(tomorrow + chrono::Duration::hours(25)).await.expect("prune"), 1, "{name}");
    }
}

fn job(tenant: &str, scope_key: &str) -> mem0_core::history::Job {
    mem0_core::history::Job {
        id: Uuid::now_v7(),
        tenant: tenant.to_owned(),
        scope_key: scope_key.to_owned(),
        scope: Scope { user_id: Some(scope_key.to_owned()), ..Scope::default() },
        caller: "{}".to_owned(),
        request: "{}".to_owned(),
        status: mem0_core::history::JobStatus::Queued,
        attempts: 0,
        created_at: Utc::now(),
        started_at: None,
        finished_at: None,
        result: None,
        error: None,
    }
}

#[tokio::test]
async fn jobs_run_in_order_per_scope_survive_their_server_and_are_bounded() {
    use mem0_core::history::JobStatus;
    for provider in providers().await {
        let name = provider.name;
        let (first, second) = (provider.first.jobs(), provider.second.jobs());
        let start = Utc::now();
        let at = |seconds: i64| start + chrono::Duration::seconds(seconds);
        let lease = chrono::Duration::seconds(60);
        // Two scopes, two jobs each, queued alternately (each a microsecond apart at least).
        let jobs = [job("t", "t/a"), job("t", "t/b"), job("t", "t/a"), job("t", "t/b")];
        for (index, queued) in jobs.iter().enumerate() {
            assert!(first
                .enqueue(queued, 10, at(0) + chrono::Duration::milliseconds(index as i64))
                .await
                .expect("enqueue"));
        }
        // Each handle (replica) takes the oldest job of a scope that has nothing running.
        let a1 = first.claim(at(1), at(1) + lease).await.expect("claim").expect("a job");
        let b1 = second.claim(at(1), at(1) + lease).await.expect("claim").expect("a job");
        assert_eq!((a1.id, b1.id), (jobs[0].id, jobs[1].id), "{name}: oldest first, one per scope");
        assert_eq!(a1.status, JobStatus::Running);
        assert!(first.claim(at(1), at(1) + lease).await.expect("claim").is_none(), "{name}: both scopes busy");
        // A failure worth retrying puts a1 back; its scope's next job still waits for it.
        assert!(first.retry_later(a1.id, 1, "{\"code\":\"provider_unavailable\"}", at(10)).await.expect("retry"));
        assert!(second.claim(at(5), at(5) + lease).await.expect("claim").is_none(), "{name}: a2 waits for a1");
        let again = second.claim(at(10), at(10) + lease).await.expect("claim").expect("a1 again");
        assert_eq!((again.id, again.attempts), (a1.id, 2), "{name}");
        // The first run's outcome no longer counts; the second's does.
        assert!(!first.succeed(again.id, 1, "{}", at(11)).await.expect("stale"), "{name}");
        assert!(first.succeed(again.id, 2, "{\"results\":[]}", at(11)).await.expect("succeed"), "{name}");
        let a2 = first.claim(at(11), at(11) + lease).await.expect("claim").expect("a2");
        assert_eq!(a2.id, jobs[2].id, "{name}");
        // b1's server dies: once its lease has run out another handle takes it over.
        assert!(second.claim(at(30), at(30) + lease).await.expect("claim").is_none(), "{name}: b1's lease holds");
        let taken = second.claim(at(62), at(62) + lease).await.expect("claim").expect("b1 taken over");
        assert_eq!((taken.id, taken.attempts), (b1.id, 2), "{name}");
        // b1's first run comes back late: it no longer holds the job.
        assert!(!first.retry_later(b1.id, 1, "{}", at(63)).await.expect("stale"), "{name}");
        assert!(first.fail(taken.id, 2, "{\"code\":\"validation_failed\"}", at(63)).await.expect("fail"), "{name}");
        let failed = second.get("t", b1.id).await.expect("get").expect("b1");
        assert_eq!(
            (failed.status, failed.error.as_deref()),
            (JobStatus::Failed, Some("{\"code\":\"validation_failed\"}"))
        );
        assert!(second.get("other", b1.id).await.expect("get").is_none(), "{name}: jobs are per tenant");
        let done = first.get("t", a1.id).await.expect("get").expect("a1");
        assert_eq!(done.status, JobStatus::Succeeded, "{name}");
        assert_eq!(
            done.error.as_deref(),
            Some("{\"code\":\"provider_unavailable\"}"),
            "{name}: the last failure is kept"
        );
        assert_eq!(done.result.as_deref(), Some("{\"results\":[]}"));
        assert_eq!(done.request, "{}", "{name}: a finished job keeps its outcome, not the messages");

        // The bound counts a tenant's open jobs: a2 and b2 are open.
        assert_eq!(first.open().await.expect("open"), 2, "{name}");
        assert!(!first.enqueue(&job("t", "t/c"), 2, at(70)).await.expect("enqueue"), "{name}: full");
        assert!(first.enqueue(&job("u", "u/c"), 2, at(70)).await.expect("enqueue"), "{name}: other tenants are not");
        // Finished jobs are pruned after their retention.
        assert_eq!(first.prune(at(64)).await.expect("prune"), 2, "{name}: a1 and b1");
        assert!(first.get("t", a1.id).await.expect("get").is_none());

        // Deleting a scope cancels its queued jobs (only those it covers).
        let (kept, doomed) = (job("k", "keep"), job("k", "gone"));
        for queued in [&kept, &doomed] {
            assert!(first.enqueue(queued, 10, at(75)).await.expect("enqueue"));
        }
        let gone = Scope { user_id: Some("gone".to_owned()), ..Scope::default() };
        assert_eq!(second.cancel("k", Some(&gone), at(76)).await.expect("cancel"), 1, "{name}");
        let cancelled = first.get("k", doomed.id).await.expect("get").expect("doomed");
        assert_eq!(cancelled.status, JobStatus::Failed, "{name}");
        assert!(cancelled.error.as_deref().is_some_and(|error| error.contains("cancelled")), "{name}");
        assert_eq!(first.get("k", kept.id).await.expect("get").expect("kept").status, JobStatus::Queued, "{name}");
        assert_eq!(second.cancel("k", None, at(77)).await.expect("cancel all"), 1, "{name}");

        // Claims racing over two handles: every job is claimed once.
        for index in 0..8 {
            assert!(first.enqueue(&job("r", &format!("r/{index}")), 100, at(80)).await.expect("enqueue"));
        }
        let racing = (0..16).map(|index| {
            let jobs = if index % 2 == 0 { first.clone() } else { second.clone() };
            async move { jobs.claim(at(81), at(81) + lease).await.expect("claim") }
        });
        let claimed: Vec<_> = futures::future::join_all(racing).await.into_iter().flatten().collect();
        let distinct: std::collections::HashSet<Uuid> = claimed.iter().map(|job| job.id).collect();
        // a2, b2, u/c and the eight r/ jobs are claimable; none twice.
        assert_eq!((claimed.len(), distinct.len()), (11, 11), "{name}");
    }
}

fn webhook(tenant: &str, events: Vec<mem0_core::history::EventKind>) -> mem0_core::history::Webhook {
    mem0_core::history::Webhook {
        id: Uuid::now_v7(),
        tenant: tenant.to_owned(),
        url: "http://127.0.0.1:9/hook".to_owned(),
        secret: "whsec_test".to_owned(),
        events,
        description: Some("test".to_owned()),
        enabled: true,
        disabled_reason: None,
        consecutive_failures: 0,
        created_at: Utc::now(),
        last_success_at: None,
        last_failure_at: None,
    }
}

#[tokio::test]
async fn webhook_deliveries_fan_out_are_claimed_once_retried_and_disable_a_dead_webhook() {
    use mem0_core::history::{Attempt, DeliveryStatus, Event, EventKind};
    for provider in providers().await {
        let name = provider.name;
        let (one, two) = (provider.first.webhooks(), provider.second.webhooks());
        let all = webhook("t", EventKind::ALL.to_vec());
        let deletions = webhook("t", vec![EventKind::MemoryDeleted]);
        let other_tenant = webhook("u", EventKind::ALL.to_vec());
        for hook in [&all, &deletions, &other_tenant] {
            assert!(one.create(hook, 2).await.expect("create"), "{name}");
        }
        assert!(!one.create(&webhook("t", EventKind::ALL.to_vec()), 2).await.expect("third"), "{name}: bounded");
        assert_eq!(two.list("t").await.expect("list").len(), 2, "{name}: seen by the other handle");
        assert_eq!(two.get("t", all.id).await.expect("get").expect("there").secret, "whsec_test", "{name}");
        assert!(two.get("u", all.id).await.expect("get").is_none(), "{name}: tenant-scoped");

        let now = Utc::now();
        let events = vec![
            Event::new("t", EventKind::MemoryAdded, serde_json::json!({"n": 1})),
            Event::new("t", EventKind::MemoryDeleted, serde_json::json!({"n": 2})),
        ];
        // added → `all`; deleted → `all` and `deletions`; nothing for the other tenant.
        assert_eq!(one.fan_out(&events, now).await.expect("fan out"), 3, "{name}");

        // Two handles claim at once: each delivery goes to one of them.
        let lease = now + chrono::Duration::seconds(60);
        let (a, b) = tokio::join!(one.claim(now, lease, 2), two.claim(now, lease, 2));
        let (a, b) = (a.expect("claim"), b.expect("claim"));
        let mut ids: Vec<Uuid> = a.iter().chain(&b).map(|claimed| claimed.delivery.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), a.len() + b.len(), "{name}: no delivery claimed twice");
        let mut claimed = a;
        claimed.extend(b);
        claimed.extend(one.claim(now, lease, 10).await.expect("claim the rest"));
        assert_eq!(claimed.len(), 3, "{name}");
        assert!(one.claim(now, lease, 10).await.expect("claim").is_empty(), "{name}: all held");
        assert!(claimed.iter().all(|c| c.url == "http://127.0.0.1:9/hook" && c.delivery.attempts == 1), "{name}");

        // `deletions` answers; `all` fails and is retried, then given up, and disabled.
        for c in &claimed {
            let outcome = if c.delivery.webhook_id == deletions.id {
                Attempt::Succeeded { status: 204 }
            } else {
                Attempt::Failed { status: Some(500), error: "500".into(), retry_at: Some(now) }
            };
            assert!(!one.record(&c.delivery, 1, &outcome, now).await.expect("record"), "{name}");
            // A stale attempt changes nothing.
            one.record(&c.delivery, 0, &Attempt::Succeeded { status: 200 }, now).await.expect("stale");
        }
        let again = two.claim(now, lease, 10).await.expect("claim retries");
        assert_eq!(again.len(), 2, "{name}: the two failed ones come back");
        assert!(again.iter().all(|c| c.delivery.attempts == 2 && c.delivery.webhook_id == all.id), "{name}");
        let give_up = Attempt::Failed { status: None, error: "connection refused".into(), retry_at: None };
        assert!(two.record(&again[0].delivery, 2, &give_up, now).await.expect("give up"), "{name}: disabled");
        let disabled = one.get("t", all.id).await.expect("get").expect("there");
        assert!(!disabled.enabled && disabled.disabled_reason.is_some(), "{name}: {disabled:?}");
        assert_eq!(disabled.consecutive_failures, 3, "{name}");
        // The other one is held while its webhook is disabled, and sent again once enabled.
        two.record(
            &again[1].delivery,
            2,
            &Attempt::Failed { status: Some(503), error: "503".into(), retry_at: Some(now) },
            now,
        )
        .await
        .expect("record");
        assert!(one.claim(now, lease, 10).await.expect("claim").is_empty(), "{name}: held while disabled");
        assert!(one.set_enabled("t", all.id, true, None).await.expect("enable"), "{name}");
        assert_eq!(one.get("t", all.id).await.expect("get").expect("there").consecutive_failures, 0, "{name}");
        assert_eq!(one.claim(now, lease, 10).await.expect("claim").len(), 1, "{name}: resumed");

        let log = two.deliveries("t", all.id, 10).await.expect("deliveries");
        assert_eq!(log.len(), 2, "{name}");
        assert!(log
            .iter()
            .any(|d| d.status == DeliveryStatus::Failed && d.error.as_deref() == Some("connection refused")));
        let done = two.deliveries("t", deletions.id, 10).await.expect("deliveries");
        assert_eq!(
            (done[0].status, done[0].response_status, done[0].event),
            (DeliveryStatus::Succeeded, Some(204), EventKind::MemoryDeleted),
            "{name}"
        );
        assert!(two.get("t", deletions.id).await.expect("get").expect("there").last_success_at.is_some(), "{name}");

        // A restart of the only sender puts held deliveries back; pruning takes finished ones.
        assert_eq!(one.requeue_sending().await.expect("requeue"), 1, "{name}");
        assert_eq!(one.prune(Utc::now() + chrono::Duration::seconds(1)).await.expect("prune"), 2, "{name}");
        assert!(one.delete("t", all.id).await.expect("delete"), "{name}");
        assert!(!one.delete("t", all.id).await.expect("delete again"), "{name}");
        assert!(one.deliveries("t", all.id, 10).await.expect("deliveries").is_empty(), "{name}: deliveries go with it");
    }
}

/// LLM token counters add up per tenant, day, provider, model and purpose, from concurrent
/// writers (two replicas), and are read back by period.
#[tokio::test]
async fn llm_usage_counters_add_up_per_day_model_and_purpose() {
    use mem0_core::history::LlmCall;
    for provider in providers().await {
        let name = provider.name;
        let day = |text: &str| text.parse::<chrono::NaiveDate>().expect("day");
        let call = |tenant: &str, at: &str, model: &str, purpose: &str, prompt: u64| LlmCall {
            tenant: tenant.to_owned(),
            at: chrono::DateTime::parse_from_rfc3339(at).expect("time").with_timezone(&Utc),
            provider: "openai".to_owned(),
            model: model.to_owned(),
            purpose: purpose.to_owned(),
            prompt_tokens: prompt,
            completion_tokens: prompt / 10,
        };
        let batch: Vec<LlmCall> = vec![
            call("acme", "2026-11-30T23:59:59Z", "m1", "extraction", 100),
            call("acme", "2026-12-01T00:00:00Z", "m1", "extraction", 200),
            call("acme", "2026-12-01T10:00:00Z", "m1", "extraction", 300),
            call("acme", "2026-12-01T10:00:00Z", "m1", "rerank", 50),
            call("acme", "2026-12-01T11:00:00Z", "m2", "extraction", 70),
            call("globex", "2026-12-01T10:00:00Z", "m1", "extraction", 999),
        ];
        let (first, second) = (provider.first.usage_log(), provider.second.usage_log());
        let writers: Vec<_> = (0..8)
            .map(|index| {
                let log = if index % 2 == 0 { first.clone() } else { second.clone() };
                let batch = batch.clone();
                tokio::spawn(async move { log.append(&batch).await })
            })
            .collect();
        for writer in writers {
            writer.await.expect("task").expect("append");
        }
        let rows = first.list("acme", day("2026-12-01"), day("2026-12-01")).await.expect("list");
        let summary: Vec<(String, String, u64, u64, u64)> = rows
            .iter()
            .map(|row| (row.model.clone(), row.purpose.clone(), row.calls, row.prompt_tokens, row.completion_tokens))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("m1".to_owned(), "extraction".to_owned(), 16, 4_000, 400),
                ("m1".to_owned(), "rerank".to_owned(), 8, 400, 40),
                ("m2".to_owned(), "extraction".to_owned(), 8, 560, 56),
            ],
            "{name}: eight writers of the same batch, the day before left out"
        );
        let both = second.list("acme", day("2026-11-01"), day("2026-12-31")).await.expect("list");
        assert_eq!(both.len(), 4, "{name}: {both:?}");
        assert_eq!(both[0].day, day("2026-11-30"), "{name}: by day");
        let other = first.list("globex", day("2026-12-01"), day("2026-12-01")).await.expect("list");
        assert_eq!(other.iter().map(|row| row.prompt_tokens).sum::<u64>(), 8 * 999, "{name}");
        // A reset of the tenant's memories and history keeps what was spent.
        provider.first.reset(Some("acme")).await.expect("reset");
        assert_eq!(first.list("acme", day("2026-12-01"), day("2026-12-01")).await.expect("list").len(), 3, "{name}");
    }
}
