//! One conformance suite for every `VectorStore`: the same inputs must give the same results for
//! tenancy, scopes, filters, ordering, pagination, expiration, search, the keyword index, entity
//! links, all-or-nothing writes with their undo, and the dimension check. Each store gets the
//! suite through `conformance_suite!`: the embedded SQLite store and Postgres + pgvector (a fresh
//! database in the test Postgres, `DATABASE_URL`), followed by tests only Postgres needs
//! (HNSW path, bulk import, concurrent writers, cancelled operations).

use std::collections::HashSet;
use std::time::Instant;

use chrono::{Datelike, Duration, NaiveDate, TimeZone, Utc};
use mem0_core::decay::MemoryRead;
use mem0_core::filter::parse_filter;
use mem0_core::retrieval::Bm25;
use mem0_core::scope::Scope;
use mem0_core::state::StateKey;
use mem0_core::store::{
    EntityHit, EntityLink, EntityProbe, KeywordIndex as _, MemoryRows as _, ScopedQuery, SqliteStore, VectorIndex as _,
    VectorStore, WriteSet,
};
use mem0_core::types::{memory_hash, MemoryRecord, MemoryStatus, Metadata, Provenance, SourceType, StateInfo};
use mem0_core::Error;
use serde_json::{json, Value};
use uuid::Uuid;

mod common;
use common::{cancel_after, PgDatabase};

const DIM: usize = 4;

fn unit(values: [f32; DIM]) -> Vec<f32> {
    let norm = values.iter().map(|v| v * v).sum::<f32>().sqrt();
    values.iter().map(|v| v / norm).collect()
}

fn record(tenant: &str, user: &str, text: &str, embedding: Vec<f32>, metadata: Value, minutes: i64) -> MemoryRecord {
    let Value::Object(metadata) = metadata else { panic!("metadata must be an object") };
    let at = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).single().expect("time") + Duration::minutes(minutes);
    MemoryRecord {
        id: Uuid::now_v7(),
        tenant: tenant.to_owned(),
        scope: Scope::new(Some(user), None, None).expect("scope"),
        memory: text.to_owned(),
        hash: memory_hash(text),
        metadata: Metadata::from_iter(metadata),
        created_at: at,
        updated_at: at,
        expiration_date: None,
        attributed_to: None,
        role: Some("user".to_owned()),
        actor_id: None,
        memory_type: None,
        linked_memory_ids: Vec::new(),
        entities: Vec::new(),
        text_lemmatized: String::new(),
        embedding: embedding.into(),
        provenance: Provenance {
            source_type: SourceType::UserStated,
            source_actor: Some(user.to_owned()),
            source_app: Some("key:conformance".to_owned()),
            evidence_ref: Some(format!("msg:{minutes}")),
            confidence: 0.9,
        },
        state: StateInfo::default(),
    }
}

async fn insert<S: VectorStore + ?Sized>(store: &S, records: &[MemoryRecord]) -> mem0_core::Result<()> {
    store.apply(&WriteSet::insert(records)).await.map(|_| ())
}

/// True when the row existed and was replaced.
async fn update<S: VectorStore + ?Sized>(store: &S, record: &MemoryRecord) -> mem0_core::Result<bool> {
    match store.apply(&WriteSet::update(record)).await {
        Ok(_) => Ok(true),
        Err(Error::MemoryNotFound { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

/// How many of `ids` existed and were deleted.
async fn delete<S: VectorStore + ?Sized>(store: &S, tenant: &str, ids: &[Uuid]) -> mem0_core::Result<usize> {
    Ok(store.apply(&WriteSet::delete(tenant, ids)).await?.deleted.len())
}

async fn relink<S: VectorStore + ?Sized>(
    store: &S,
    links: &[EntityLink],
    replace: &[Uuid],
    merge_threshold: f32,
) -> mem0_core::Result<()> {
    store.apply(&WriteSet::relink(links, replace, merge_threshold)).await.map(|_| ())
}

/// Deletes every memory of `query`'s scope.
async fn delete_matching<S: VectorStore + ?Sized>(
    store: &S,
    query: &ScopedQuery,
) -> mem0_core::Result<Vec<MemoryRecord>> {
    let page = store.list(&ScopedQuery { show_expired: true, ..query.clone() }, None, 1000).await?;
    let ids: Vec<Uuid> = page.records.iter().map(|record| record.id).collect();
    Ok(store.apply(&WriteSet::delete(&query.tenant, &ids)).await?.deleted)
}

/// The memories linked to the probes' entities (every candidate: a limit above the scope's size).
async fn entity_memories<S: VectorStore + ?Sized>(
    store: &S,
    query: &ScopedQuery,
    probes: &[EntityProbe],
    threshold: f32,
) -> mem0_core::Result<Vec<EntityHit>> {
    Ok(store.entity_candidates(query, probes, threshold, 1000).await?.hits)
}

fn query(tenant: &str, user: &str, filter: Option<Value>) -> ScopedQuery {
    ScopedQuery {
        tenant: tenant.to_owned(),
        scope: Scope::new(Some(user), None, None).expect("scope"),
        filter: filter.map(|value| parse_filter(&value).expect("filter")),
        show_expired: false,
        include_superseded: false,
        today: NaiveDate::from_ymd_opt(2026, 6, 1).expect("date"),
        fresh_since: None,
    }
}

async fn check_tenancy_and_crud(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let mut mine = record("t1", "u", "mine", unit([1.0, 0.0, 0.0, 0.0]), json!({"k": 1}), 0);
    // Extraction output round-trips: attribution, links and entities (incl. non-ASCII).
    mine.attributed_to = Some("user".into());
    mine.linked_memory_ids = vec![Uuid::now_v7(), Uuid::now_v7()];
    mine.entities = vec!["Biscuit".into(), "成都".into()];
    let theirs = record("t2", "u", "theirs", unit([1.0, 0.0, 0.0, 0.0]), json!({}), 0);
    insert(store, &[mine.clone(), theirs.clone()]).await.expect("insert");
    assert_eq!(store.get("t1", mine.id).await.expect("get"), Some(mine.clone()));
    assert_eq!(store.get("t1", theirs.id).await.expect("get"), None, "another tenant's id is invisible");
    // Twice: the embedded store serves the second from its row cache, tenancy included.
    for _ in 0..2 {
        assert_eq!(store.get_many("t1", &[mine.id, theirs.id]).await.expect("get_many"), vec![mine.clone()]);
        assert_eq!(store.get_many("t2", &[mine.id]).await.expect("get_many"), Vec::new());
    }
    assert_eq!(delete(store, "t1", &[theirs.id]).await.expect("delete"), 0, "and cannot be deleted");
    let hits = store.search(&query("t1", "u", None), &unit([1.0, 0.0, 0.0, 0.0]), 10, 0.0).await.expect("search");
    assert_eq!(hits.iter().map(|hit| hit.record.memory.as_str()).collect::<Vec<_>>(), ["mine"]);

    let mut changed = mine.clone();
    changed.memory = "changed".into();
    changed.hash = memory_hash("changed");
    changed.embedding = unit([0.0, 1.0, 0.0, 0.0]).into();
    assert!(update(store, &changed).await.expect("update"));
    assert_eq!(store.get("t1", mine.id).await.expect("get").map(|r| r.memory), Some("changed".into()));
    assert_eq!(store.get_many("t1", &[mine.id]).await.expect("get_many"), vec![changed.clone()], "not a cached row");
    let mut foreign = changed.clone();
    foreign.tenant = "t2".into();
    assert!(!update(store, &foreign).await.expect("update"), "updates are confined to the tenant");

    assert_eq!(delete(store, "t1", &[mine.id]).await.expect("delete"), 1);
    assert_eq!(store.get("t1", mine.id).await.expect("get"), None);
    assert_eq!(store.get_many("t1", &[mine.id]).await.expect("get_many"), Vec::new());
    assert_eq!(store.get_many("t2", &[theirs.id]).await.expect("get_many").len(), 1);
    store.reset(Some("t2")).await.expect("reset");
    assert_eq!(store.get("t2", theirs.id).await.expect("get"), None);
    assert_eq!(store.get_many("t2", &[theirs.id]).await.expect("get_many"), Vec::new());
}

async fn check_search_is_exact_top_k(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let mut records = Vec::new();
    for index in 0..200 {
        let angle = index as f32 * 0.031;
        let user = if index % 10 == 0 { "small" } else { "big" };
        records.push(record(
            "t",
            user,
            &format!("m{index}"),
            unit([angle.cos(), angle.sin(), 0.1, 0.0]),
            json!({"i": index}),
            index,
        ));
    }
    insert(store, &records).await.expect("insert");
    let probe = unit([1.0, 0.2, 0.1, 0.0]);
    let hits = store.search(&query("t", "small", None), &probe, 5, 0.0).await.expect("search");
    let mut expected: Vec<(f32, String)> = records
        .iter()
        .filter(|r| r.scope.user_id.as_deref() == Some("small"))
        .map(|r| (r.embedding.iter().zip(&probe).map(|(a, b)| a * b).sum::<f32>(), r.memory.clone()))
        .collect();
    expected.sort_by(|a, b| b.0.total_cmp(&a.0));
    let got: Vec<&str> = hits.iter().map(|hit| hit.record.memory.as_str()).collect();
    let want: Vec<&str> = expected.iter().take(5).map(|(_, text)| text.as_str()).collect();
    assert_eq!(got, want, "a small scope in a larger table gets its exact top-k");
    for (hit, (score, _)) in hits.iter().zip(&expected) {
        assert!((hit.score - score).abs() < 1e-5);
    }
    let filtered = store
        .search(&query("t", "big", Some(json!({"i": {"gte": 100, "lt": 110}}))), &probe, 50, 0.0)
        .await
        .expect("search");
    assert_eq!(filtered.len(), 9, "filters apply before top-k (i = 100..109 minus the one of `small`)");
    let strict = store.search(&query("t", "big", None), &probe, 500, 0.99).await.expect("search");
    assert!(strict.iter().all(|hit| hit.score >= 0.99));
}

async fn check_listing_order_pages_and_expiration(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let mut records: Vec<MemoryRecord> =
        (0..25).map(|i| record("t", "u", &format!("r{i}"), unit([1.0, 1.0, 0.0, 0.0]), json!({}), i / 3)).collect();
    records[0].expiration_date = NaiveDate::from_ymd_opt(2026, 5, 31);
    records[1].expiration_date = NaiveDate::from_ymd_opt(2026, 6, 1);
    insert(store, &records).await.expect("insert");
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list(&query("t", "u", None), cursor, 7).await.expect("list");
        seen.extend(page.records.iter().map(|r| (r.created_at, r.id)));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 24, "expired yesterday is hidden, expiring today is visible");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted, "newest first, ties by id descending");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), seen.len());
    let with_expired = ScopedQuery { show_expired: true, ..query("t", "u", None) };
    assert_eq!(store.list(&with_expired, None, 100).await.expect("list").records.len(), 25);

    // Numbered pages: the same order, the same rows, and the count of what matches.
    assert_eq!(store.count(&query("t", "u", None)).await.expect("count"), 24);
    assert_eq!(store.count(&with_expired).await.expect("count"), 25);
    assert_eq!(store.count(&query("t", "nobody", None)).await.expect("count"), 0);
    assert_eq!(store.count(&query("other-tenant", "u", None)).await.expect("count"), 0);
    let mut numbered = Vec::new();
    for page in 0..4 {
        let rows = store.list_at(&query("t", "u", None), page * 7, 7).await.expect("list_at");
        assert_eq!(rows.len(), [7, 7, 7, 3][page], "page {page}");
        numbered.extend(rows.iter().map(|r| (r.created_at, r.id)));
    }
    assert_eq!(numbered, seen, "numbered pages list what the cursor pages list, in order");
    assert!(store.list_at(&query("t", "u", None), 24, 7).await.expect("past the end").is_empty());

    let deleted = delete_matching(store, &query("t", "u", None)).await.expect("delete");
    assert_eq!(deleted.len(), 25, "scope deletes include expired rows");
    assert!(store.list(&with_expired, None, 100).await.expect("list").records.is_empty());
}

async fn check_dimension_mismatch(store: &dyn VectorStore) {
    store.ensure_dimension(384, "all-MiniLM-L6-v2").await.expect("first use records the dimension");
    store.ensure_dimension(384, "all-MiniLM-L6-v2").await.expect("same dimension is fine");
    let error = store.ensure_dimension(1536, "text-embedding-3-small").await.expect_err("mismatch");
    let Error::Config(message) = error else { panic!("expected a config error, got {error:?}") };
    assert!(message.contains("384") && message.contains("1536"), "{message}");
}

async fn check_filters(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([1.0, 0.0, 0.0, 0.0]);
    let rows = [
        ("alpha", json!({"n": 3, "flag": true, "tag": "red", "who": "Ann"}), 0),
        ("beta", json!({"n": 10, "flag": false, "tag": "blue"}), 1),
        ("gamma", json!({"n": "3", "flag": "true", "tag": "Red wine"}), 2),
        ("delta", json!({"n": 2.5, "tag": "green", "dotted.key": "yes"}), 3),
    ];
    let mut records: Vec<MemoryRecord> = rows
        .iter()
        .map(|(text, metadata, minute)| record("t", "u", text, v.clone(), metadata.clone(), *minute))
        .collect();
    records[1].role = Some("assistant".into());
    records[1].provenance = Provenance {
        source_type: SourceType::AssistantStated,
        source_actor: Some("helper-bot".into()),
        confidence: 0.7,
        ..Provenance::default()
    };
    records[2].provenance.source_type = SourceType::ToolResult;
    records[2].provenance.confidence = 0.85;
    records[3].provenance =
        Provenance { source_type: SourceType::HumanReviewed, confidence: 1.0, ..Provenance::default() };
    insert(store, &records).await.expect("insert");
    insert(store, &[record("t", "other", "other user", v.clone(), json!({"n": 3}), 0)]).await.expect("insert");
    let cases = [
        (json!({"n": 3}), vec!["alpha"]),
        (json!({"n": "3"}), vec!["gamma"]),
        (json!({"n": {"gt": 2.9}}), vec!["alpha", "beta"]),
        (json!({"n": {"gte": 3, "lt": 10}}), vec!["alpha"]),
        (json!({"flag": true}), vec!["alpha"]),
        (json!({"flag": "true"}), vec!["gamma"]),
        (json!({"flag": {"ne": true}}), vec!["beta", "delta", "gamma"]),
        (json!({"n": [3, 10]}), vec!["alpha", "beta"]),
        (json!({"tag": {"nin": ["red", "blue"]}}), vec!["delta", "gamma"]),
        (json!({"tag": {"contains": "re"}}), vec!["alpha", "delta"]),
        (json!({"tag": {"icontains": "RED"}}), vec!["alpha", "gamma"]),
        (json!({"tag": {"contains": "%"}}), vec![]),
        (json!({"who": "*"}), vec!["alpha"]),
        // `*` on a text field: it has a value (Mem0's wildcard ids).
        (json!({"source_actor": "*"}), vec!["alpha", "beta", "gamma"]),
        (json!({"AND": [{"user_id": "*"}, {"agent_id": {"ne": "x"}}]}), vec!["alpha", "beta", "delta", "gamma"]),
        (json!({"NOT": {"source_actor": "*"}}), vec!["delta"]),
        (json!({"dotted.key": "yes"}), vec!["delta"]),
        (json!({"tag": {"gt": "green"}}), vec!["alpha"]),
        (json!({"role": "assistant"}), vec!["beta"]),
        (json!({"role": {"ne": "assistant"}}), vec!["alpha", "delta", "gamma"]),
        (json!({"created_at": {"gte": "2025-01-01T00:02:00Z"}}), vec!["delta", "gamma"]),
        (
            json!({"OR": [{"AND": [{"n": {"gte": 3}}, {"NOT": [{"flag": false}]}]}, {"tag": "green"}]}),
            vec!["alpha", "delta"],
        ),
        (json!({"NOT": {"OR": [{"tag": "red"}, {"tag": "blue"}]}}), vec!["delta", "gamma"]),
        (json!({"AND": [{"n": 3}, {"n": 10}]}), vec![]),
        (json!({"user_id": "other"}), vec![]),
        // Provenance columns: text and number, with stored confidences compared exactly.
        (json!({"source_type": "tool_result"}), vec!["gamma"]),
        (json!({"source_type": {"in": ["assistant_stated", "human_reviewed"]}}), vec!["beta", "delta"]),
        (json!({"confidence": {"gte": 0.9}}), vec!["alpha", "delta"]),
        (json!({"confidence": 0.85}), vec!["gamma"]),
        (json!({"confidence": {"lt": 0.85}}), vec!["beta"]),
        (json!({"source_actor": {"icontains": "BOT"}}), vec!["beta"]),
        (json!({"source_app": "key:conformance"}), vec!["alpha", "gamma"]),
        (json!({"evidence_ref": "msg:0"}), vec!["alpha"]),
    ];
    for (filter, expected) in cases {
        let query = query("t", "u", Some(filter.clone()));
        let mut listed: Vec<String> =
            store.list(&query, None, 100).await.expect("list").records.into_iter().map(|r| r.memory).collect();
        listed.sort();
        assert_eq!(listed, expected, "list with {filter}");
        let mut found: Vec<String> = store
            .search(&query, &v, 100, 0.0)
            .await
            .expect("search")
            .into_iter()
            .map(|hit| hit.record.memory.clone())
            .collect();
        found.sort();
        assert_eq!(found, expected, "search with {filter}");
    }
}

async fn check_scope_listing(store: &dyn VectorStore) {
    use mem0_core::store::ScopeKind;
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([0.0, 1.0, 0.0, 0.0]);
    let mut records = vec![
        record("t", "b-user", "1", v.clone(), json!({}), 0),
        record("t", "a-user", "2", v.clone(), json!({}), 1),
        record("t", "a-user", "3", v.clone(), json!({}), 2),
        record("other", "z-user", "4", v.clone(), json!({}), 0),
    ];
    records[0].scope.agent_id = Some("agent-1".into());
    insert(store, &records).await.expect("insert");
    let users = store.scopes("t", ScopeKind::User, None, 10).await.expect("scopes");
    let summary: Vec<(&str, u64)> = users.iter().map(|s| (s.id.as_str(), s.total_memories)).collect();
    assert_eq!(summary, [("a-user", 2), ("b-user", 1)]);
    let after = store.scopes("t", ScopeKind::User, Some("a-user"), 10).await.expect("scopes");
    assert_eq!(after.len(), 1);
    let agents = store.scopes("t", ScopeKind::Agent, None, 10).await.expect("scopes");
    assert_eq!(agents.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["agent-1"]);
}

/// The keyword index follows every write: statistics over the scope (tenant and scope ids, every
/// expiration, no filter), candidates only from the query (scope, expiration, filter), scored in
/// the store exactly as `Bm25::score_text` scores the memory's text, best first; updated and
/// deleted with the row.
/// What listing, dense search and keyword candidates show of user `u`: texts (list and search
/// agree), keyword candidates for "live boston", and the scope's document count.
async fn chain_view(store: &dyn VectorStore, v: &[f32], include_superseded: bool) -> (Vec<String>, usize, u64) {
    let query = ScopedQuery { include_superseded, ..query("t", "u", None) };
    let mut texts: Vec<String> =
        store.list(&query, None, 100).await.expect("list").records.into_iter().map(|r| r.memory).collect();
    texts.sort();
    let mut found: Vec<String> = store
        .search(&query, v, 100, 0.0)
        .await
        .expect("search")
        .into_iter()
        .map(|hit| hit.record.memory.clone())
        .collect();
    found.sort();
    assert_eq!(texts, found, "list and search agree");
    let terms = ["live".to_owned(), "boston".to_owned()];
    let keyword = store.keyword_candidates(&query, &terms, 100).await.expect("keyword");
    (texts, keyword.top.len(), keyword.stats.doc_count)
}

/// Chains of a state key: the newest by event time is current whatever the arrival order, older
/// ones are superseded (hidden from listing, search and keyword candidates unless asked for),
/// other scopes keep their own chain, equal times from different sources are a conflict, deleting
/// the current value brings back the one before, and undoing a write restores the chain.
/// Sixteen writes of one key at once, each in its own transaction, arriving in an order unrelated
/// to their event times: one active value (the newest event) and every other superseded by its
/// successor in time. (Without the store's lock per key, writers each resolve the chain they saw
/// before the others committed.)
async fn check_concurrent_writers_of_one_key(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([0.0, 1.0, 0.0, 0.0]);
    let scope = Scope::new(Some("racer"), None, None).expect("scope");
    let day = |d: u32| Utc.with_ymd_and_hms(2026, 3, d, 12, 0, 0).single().expect("time");
    let values: Vec<MemoryRecord> = (0..16_u32)
        .map(|index| {
            let d = 1 + (index * 7) % 16;
            let mut memory = record("t", "racer", &format!("trains at gym {d}"), v.clone(), json!({}), i64::from(d));
            memory.state =
                StateInfo { state_key: Some("user.gym".into()), event_time: Some(day(d)), ..StateInfo::default() };
            memory
        })
        .collect();
    let key = StateKey { tenant: "t".into(), scope: scope.clone(), key: "user.gym".into() };
    let writes: Vec<WriteSet> = values
        .iter()
        .map(|memory| WriteSet {
            tenant: "t".into(),
            resolve: vec![key.clone()],
            ..WriteSet::insert(std::slice::from_ref(memory))
        })
        .collect();
    for applied in futures::future::join_all(writes.iter().map(|write| store.apply(write))).await {
        applied.expect("write");
    }
    let day_of: std::collections::HashMap<Uuid, u32> =
        values.iter().map(|memory| (memory.id, memory.state.event_time.expect("time").day())).collect();
    let mut active = Vec::new();
    for memory in &values {
        let stored = store.get("t", memory.id).await.expect("get").expect("present");
        let d = day_of[&memory.id];
        match stored.state.status {
            MemoryStatus::Active => active.push(d),
            MemoryStatus::Superseded => {
                let successor = stored.state.superseded_by.expect("successor");
                assert_eq!(day_of[&successor], d + 1, "day {d} is superseded by the next day");
                assert_eq!(stored.state.valid_to, Some(day(d + 1)), "day {d} ends when the next begins");
            }
            other => panic!("day {d}: {other:?}"),
        }
    }
    assert_eq!(active, [16], "one current value, the newest");

    // Sixteen concurrent changes of event times only (no row inserted or deleted, so nothing else
    // makes the writers wait for each other): the order reverses.
    let mut moved = Vec::new();
    for memory in &values {
        let mut stored = store.get("t", memory.id).await.expect("get").expect("present");
        stored.state.event_time = Some(day(17 - day_of[&memory.id]));
        moved.push(stored);
    }
    let updates: Vec<WriteSet> = moved
        .iter()
        .map(|memory| WriteSet { tenant: "t".into(), resolve: vec![key.clone()], ..WriteSet::update(memory) })
        .collect();
    for applied in futures::future::join_all(updates.iter().map(|write| store.apply(write))).await {
        applied.expect("update");
    }
    let mut active = Vec::new();
    for memory in &values {
        let stored = store.get("t", memory.id).await.expect("get").expect("present");
        let d = 17 - day_of[&memory.id];
        match stored.state.status {
            MemoryStatus::Active => active.push(d),
            MemoryStatus::Superseded => {
                let successor = stored.state.superseded_by.expect("successor");
                assert_eq!(17 - day_of[&successor], d + 1, "after the moves, day {d} is superseded by the next day");
            }
            other => panic!("day {d}: {other:?}"),
        }
    }
    assert_eq!(active, [16], "one current value after the moves: the value first told as day 1");
}

async fn check_state_chains(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([1.0, 0.0, 0.0, 0.0]);
    let day = |d: u32| Utc.with_ymd_and_hms(2026, 3, d, 12, 0, 0).single().expect("time");
    let city = |text: &str, lemma: &str, d: u32| {
        let mut memory = record("t", "u", text, v.clone(), json!({}), i64::from(d));
        memory.text_lemmatized = lemma.to_owned();
        memory.state =
            StateInfo { state_key: Some("user.home_city".into()), event_time: Some(day(d)), ..StateInfo::default() };
        memory
    };
    let key = |scope: &Scope| StateKey { tenant: "t".into(), scope: scope.clone(), key: "user.home_city".into() };
    let scope = Scope::new(Some("u"), None, None).expect("scope");
    let write = |records: Vec<MemoryRecord>| WriteSet {
        tenant: "t".into(),
        resolve: vec![key(&scope)],
        ..WriteSet::insert(&records)
    };
    let status = |id: Uuid| async move {
        let record = store.get("t", id).await.expect("get").expect("present");
        // Read by `get_many` too, which the embedded store serves from its row cache once read:
        // a chain's resolution changes rows the write did not name, and they must not stay cached.
        let many = store.get_many("t", &[id]).await.expect("get_many");
        assert_eq!(many.iter().map(|record| &record.state).collect::<Vec<_>>(), [&record.state]);
        (record.state.status, record.state.superseded_by, record.state.valid_to)
    };
    let new_york = city("lives in New York", "live new york", 1);
    let san_francisco = city("lives in San Francisco", "live san francisco", 20);
    let unrelated = record("t", "u", "likes tea", v.clone(), json!({}), 0);
    store.apply(&write(vec![new_york.clone(), unrelated.clone()])).await.expect("insert");
    store.apply(&write(vec![san_francisco.clone()])).await.expect("insert");
    assert_eq!(status(new_york.id).await, (MemoryStatus::Superseded, Some(san_francisco.id), Some(day(20))));
    assert_eq!(status(san_francisco.id).await, (MemoryStatus::Active, None, None));
    // A value that arrives late slots in by event time.
    let boston = city("lives in Boston", "live boston", 10);
    let applied = store.apply(&write(vec![boston.clone()])).await.expect("insert");
    assert_eq!(status(new_york.id).await, (MemoryStatus::Superseded, Some(boston.id), Some(day(10))));
    assert_eq!(status(boston.id).await, (MemoryStatus::Superseded, Some(san_francisco.id), Some(day(20))));

    assert_eq!(
        chain_view(store, &v, false).await,
        (vec!["likes tea".to_owned(), "lives in San Francisco".to_owned()], 1, 4)
    );
    let (all, candidates, docs) = chain_view(store, &v, true).await;
    assert_eq!((all.len(), candidates, docs), (4, 3, 4), "the whole chain on request; statistics count it always");

    // Undoing the late write restores the chain as it was.
    let undo = write(vec![boston.clone()]).inverse(&applied, Vec::new());
    store.apply(&undo).await.expect("undo");
    assert_eq!(status(new_york.id).await, (MemoryStatus::Superseded, Some(san_francisco.id), Some(day(20))));
    store.apply(&write(vec![boston.clone()])).await.expect("again");

    // Another scope has a chain of its own.
    let agent_scope = Scope::new(Some("u"), Some("agent-1"), None).expect("scope");
    let mut elsewhere = city("agent thinks Lisbon", "agent think lisbon", 25);
    elsewhere.scope = agent_scope.clone();
    store
        .apply(&WriteSet { resolve: vec![key(&agent_scope)], ..WriteSet::insert(std::slice::from_ref(&elsewhere)) })
        .await
        .expect("insert");
    assert_eq!(status(elsewhere.id).await.0, MemoryStatus::Active);
    assert_eq!(status(san_francisco.id).await.0, MemoryStatus::Active, "not superseded by another scope");

    // Same event time, different sources: both current, flagged.
    let mut told = city("assistant says Oakland", "oakland", 20);
    told.provenance.source_type = SourceType::AssistantStated;
    store.apply(&write(vec![told.clone()])).await.expect("insert");
    assert_eq!(status(told.id).await.0, MemoryStatus::Conflict);
    assert_eq!(status(san_francisco.id).await.0, MemoryStatus::Conflict);
    // Deleting one of them leaves the other current; deleting that brings Boston back.
    store.apply(&WriteSet { resolve: vec![key(&scope)], ..WriteSet::delete("t", &[told.id]) }).await.expect("delete");
    assert_eq!(status(san_francisco.id).await, (MemoryStatus::Active, None, None));
    store
        .apply(&WriteSet { resolve: vec![key(&scope)], ..WriteSet::delete("t", &[san_francisco.id]) })
        .await
        .expect("delete");
    assert_eq!(status(boston.id).await, (MemoryStatus::Active, None, None));
    // Key and status filter like any field (the status filter narrows what is shown).
    let keyed = ScopedQuery {
        filter: Some(parse_filter(&json!({"state_key": "user.home_city"})).expect("filter")),
        include_superseded: true,
        ..query("t", "u", None)
    };
    assert_eq!(
        store.list(&keyed, None, 100).await.expect("list").records.len(),
        3,
        "New York, Boston, the agent's Lisbon"
    );
    let superseded = ScopedQuery {
        filter: Some(parse_filter(&json!({"status": "superseded"})).expect("filter")),
        include_superseded: true,
        ..query("t", "u", None)
    };
    let old: Vec<String> =
        store.list(&superseded, None, 100).await.expect("list").records.into_iter().map(|r| r.memory).collect();
    assert_eq!(old, ["lives in New York"]);
}

/// The read log: the latest read per memory wins, repeats in one batch count once per memory,
/// reads of unknown memories or of another tenant's are ignored, and a memory's reads go with it.
async fn check_reads(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([1.0, 0.0, 0.0, 0.0]);
    let (one, two) =
        (record("t", "u", "one", v.clone(), json!({}), 0), record("t", "u", "two", v.clone(), json!({}), 1));
    insert(store, &[one.clone(), two.clone()]).await.expect("insert");
    let at =
        |minutes: i64| Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).single().expect("time") + Duration::minutes(minutes);
    let read =
        |tenant: &str, memory_id: Uuid, minutes: i64| MemoryRead { tenant: tenant.into(), memory_id, at: at(minutes) };
    store
        .record_reads(&[
            read("t", one.id, 5),
            read("t", one.id, 9),
            read("t", one.id, 7),
            read("t", Uuid::now_v7(), 1),
            read("t2", two.id, 3),
        ])
        .await
        .expect("record");
    let last = store.last_reads("t", &[one.id, two.id]).await.expect("last");
    assert_eq!(last.len(), 1, "two was only read by another tenant: {last:?}");
    assert_eq!(last[&one.id], at(9));
    store.record_reads(&[read("t", one.id, 2), read("t", two.id, 4)]).await.expect("record");
    let last = store.last_reads("t", &[one.id, two.id]).await.expect("last");
    assert_eq!((last[&one.id], last[&two.id]), (at(9), at(4)), "an older read does not move the last one back");
    assert!(store.last_reads("t2", &[one.id]).await.expect("last").is_empty(), "per tenant");
    store.apply(&WriteSet::delete("t", &[one.id])).await.expect("delete");
    assert!(!store.last_reads("t", &[one.id]).await.expect("last").contains_key(&one.id), "gone with its memory");
    // A busy server's batch: reads of more memories than one statement holds.
    let many: Vec<MemoryRecord> =
        (0..601_i64).map(|index| record("t", "u", &format!("fact {index}"), v.clone(), json!({}), index)).collect();
    insert(store, &many).await.expect("insert many");
    let reads: Vec<MemoryRead> = many.iter().map(|memory| read("t", memory.id, 20)).collect();
    store.record_reads(&reads).await.expect("record many");
    let ids: Vec<Uuid> = many.iter().map(|memory| memory.id).collect();
    let last = store.last_reads("t", &ids).await.expect("last");
    assert_eq!(last.len(), 601);
    assert!(last.values().all(|at_| *at_ == at(20)));
}

async fn check_keyword_index(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([1.0, 0.0, 0.0, 0.0]);
    let analysed = |text: &str, lemmas: &str, user: &str, metadata: Value| {
        let mut memory = record("t", user, text, v.clone(), metadata, 0);
        memory.text_lemmatized = lemmas.to_owned();
        memory
    };
    let peanut = analysed("peanut allergy, peanut", "peanut allergi peanut", "u", json!({"kind": "health"}));
    let tea = analysed("likes tea", "like tea", "u", json!({"kind": "food"}));
    let cjk = analysed("去成都出差", "成都 出差", "u", json!({}));
    let mut expired = analysed("old peanut", "old peanut", "u", json!({}));
    expired.expiration_date = NaiveDate::from_ymd_opt(2000, 1, 1);
    let other_user = analysed("peanut", "peanut", "someone-else", json!({}));
    let mut other_tenant = analysed("peanut", "peanut", "u", json!({}));
    other_tenant.tenant = "t2".into();
    let mut agent_only = analysed("peanut", "peanut", "x", json!({}));
    agent_only.scope = Scope::new(None, Some("agent-1"), None).expect("scope");
    insert(store, &[peanut.clone(), tea.clone(), cjk.clone(), expired.clone(), other_user, other_tenant, agent_only])
        .await
        .expect("insert");

    let terms = ["peanut".to_owned(), "tea".to_owned(), "成都".to_owned(), "missing".to_owned()];
    let found = store.keyword_candidates(&query("t", "u", None), &terms, 100).await.expect("keyword");
    assert_eq!(found.stats.doc_count, 4, "the scope's memories, the expired one included; not other scopes");
    assert!((found.stats.avg_doc_len - 9.0 / 4.0).abs() < 1e-9, "{}", found.stats.avg_doc_len);
    let mut df: Vec<(String, u64)> = found.stats.document_frequency.clone().into_iter().collect();
    df.sort();
    let mut want = vec![("peanut".to_owned(), 2), ("tea".to_owned(), 1), ("成都".to_owned(), 1)];
    want.sort();
    assert_eq!(df, want);
    let bm25 = Bm25::new(&found.stats, &terms);
    let texts = [&peanut, &tea, &cjk];
    let mut expected: Vec<(Uuid, f64)> =
        texts.iter().map(|record| (record.id, bm25.score_text(&record.text_lemmatized))).collect();
    expected.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    assert_eq!(found.top.len(), 3, "the expired memory and other scopes are not candidates: {:?}", found.top);
    for ((id, score), (want_id, want_score)) in found.top.iter().zip(&expected) {
        assert_eq!(id, want_id, "{:?} vs {expected:?}", found.top);
        assert!((score - want_score).abs() < 1e-9, "the store's BM25 {score} is the text's {want_score}");
    }
    let best = store.keyword_candidates(&query("t", "u", None), &terms, 1).await.expect("keyword");
    assert_eq!(best.top, found.top[..1].to_vec());
    let with_expired = ScopedQuery { show_expired: true, ..query("t", "u", None) };
    let all = store.keyword_candidates(&with_expired, &terms, 100).await.expect("keyword");
    assert_eq!(all.top.len(), 4);
    assert!(all.top.iter().any(|(id, _)| *id == expired.id));
    let agent = ScopedQuery { scope: Scope::new(None, Some("agent-1"), None).expect("scope"), ..query("t", "u", None) };
    let by_agent = store.keyword_candidates(&agent, &terms, 100).await.expect("keyword");
    assert_eq!((by_agent.stats.doc_count, by_agent.top.len()), (1, 1), "a scope without user id");

    // Filters choose candidates, not statistics: a memory scores the same whatever finds it.
    let health = store
        .keyword_candidates(&query("t", "u", Some(json!({"kind": "health"}))), &terms, 100)
        .await
        .expect("keyword");
    assert_eq!(health.stats, found.stats);
    let peanut_score = expected.iter().find(|(id, _)| *id == peanut.id).map(|(_, score)| *score).expect("peanut");
    assert_eq!(health.top.len(), 1);
    assert_eq!(health.top[0].0, peanut.id);
    assert!((health.top[0].1 - peanut_score).abs() < 1e-9);

    // Updates re-index, deletes remove, statistics follow.
    let mut changed = peanut.clone();
    changed.memory = "likes green tea".into();
    changed.text_lemmatized = "like green tea tea".into();
    assert!(update(store, &changed).await.expect("update"));
    let after = store.keyword_candidates(&query("t", "u", None), &terms, 100).await.expect("keyword");
    assert_eq!(after.stats.doc_count, 4);
    assert!((after.stats.avg_doc_len - 10.0 / 4.0).abs() < 1e-9, "{}", after.stats.avg_doc_len);
    assert_eq!(after.stats.document_frequency.get("tea"), Some(&2));
    assert_eq!(after.stats.document_frequency.get("peanut"), Some(&1), "only the expired memory");
    let mut ids: Vec<Uuid> = after.top.iter().map(|(id, _)| *id).collect();
    ids.sort();
    let mut want = vec![peanut.id, tea.id, cjk.id];
    want.sort();
    assert_eq!(ids, want);
    let rank = |id: Uuid| after.top.iter().position(|(candidate, _)| *candidate == id);
    assert!(rank(peanut.id) < rank(tea.id), "tea twice beats tea once: {:?}", after.top);
    delete(store, "t", &[tea.id]).await.expect("delete");
    let after = store.keyword_candidates(&query("t", "u", None), &terms, 100).await.expect("keyword");
    assert_eq!(after.stats.doc_count, 3);
    assert!(after.top.iter().all(|(id, _)| *id != tea.id));

    let many = store.get_many("t", &[peanut.id, tea.id, cjk.id, Uuid::now_v7()]).await.expect("get_many");
    let mut texts: Vec<String> = many.iter().map(|r| r.memory.clone()).collect();
    texts.sort();
    assert_eq!(texts, ["likes green tea", "去成都出差"]);
    assert_eq!(many.iter().find(|r| r.id == cjk.id).map(|r| r.text_lemmatized.as_str()), Some("成都 出差"));
    assert!(store.get_many("t2", &[peanut.id]).await.expect("get_many").is_empty(), "other tenant");
    let nobody = store.keyword_candidates(&query("t", "nobody", None), &terms, 100).await.expect("empty");
    assert_eq!((nobody.stats.doc_count, nobody.top.len()), (0, 0));
    // A reset of the tenant leaves no statistics behind; the other tenant keeps its own.
    store.reset(Some("t")).await.expect("reset");
    let reset = store.keyword_candidates(&query("t", "u", None), &terms, 100).await.expect("keyword");
    assert_eq!((reset.stats.doc_count, reset.top.len()), (0, 0));
    let kept = store.keyword_candidates(&query("t2", "u", None), &terms, 100).await.expect("keyword");
    assert_eq!((kept.stats.doc_count, kept.top.len()), (1, 1));
}

/// Entity links: rows per scope, matched by normalised name or embedding, merged on write,
/// replaced on update, removed with their memories, and read through the query's scope and filters.
async fn check_entity_links(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([1.0, 0.0, 0.0, 0.0]);
    let caroline = unit([0.0, 1.0, 0.0, 0.0]);
    let sweden = unit([0.0, 0.0, 1.0, 0.0]);
    let almost_sweden = unit([0.0, 0.0, 1.0, 0.1]);
    let m1 = record("t", "u", "Caroline moved from Sweden", v.clone(), json!({"kind": "a"}), 0);
    let m2 = record("t", "u", "caroline paints", v.clone(), json!({"kind": "b"}), 1);
    let m3 = record("t", "other", "Caroline elsewhere", v.clone(), json!({}), 2);
    insert(store, &[m1.clone(), m2.clone(), m3.clone()]).await.expect("insert");
    let link = |memory: &MemoryRecord, name: &str, embedding: &Vec<f32>| EntityLink {
        memory_id: memory.id,
        tenant: memory.tenant.clone(),
        scope: memory.scope.clone(),
        name: name.to_owned(),
        normalized: name.to_lowercase(),
        kind: "proper".to_owned(),
        embedding: embedding.clone(),
    };
    relink(
        store,
        &[
            link(&m1, "Caroline", &caroline),
            link(&m1, "Sweden", &sweden),
            link(&m2, "caroline", &caroline),
            link(&m2, "Swedish Kingdom", &almost_sweden),
            link(&m3, "Caroline", &caroline),
        ],
        &[],
        0.95,
    )
    .await
    .expect("link");
    let probe =
        |name: &str, embedding: &Vec<f32>| EntityProbe { normalized: name.to_owned(), embedding: embedding.clone() };
    let hits_for = |hits: Vec<EntityHit>| {
        let mut ids: Vec<(Uuid, usize)> = hits.iter().map(|hit| (hit.memory_id, hit.probe)).collect();
        ids.sort();
        ids.dedup();
        ids
    };
    let sorted = |mut ids: Vec<(Uuid, usize)>| {
        ids.sort();
        ids
    };
    // By name, only in the query's scope.
    let hits =
        entity_memories(store, &query("t", "u", None), &[probe("caroline", &caroline)], 0.9).await.expect("hits");
    assert_eq!(hits_for(hits), sorted(vec![(m1.id, 0), (m2.id, 0)]));
    // The best candidate alone (both link one probe: the newer wins the tie), the counts over the
    // scope, and the links of other memories to the same entity rows.
    let best = store
        .entity_candidates(&query("t", "u", None), &[probe("caroline", &caroline)], 0.9, 1)
        .await
        .expect("candidates");
    assert_eq!(hits_for(best.hits), vec![(m2.id, 0)]);
    assert_eq!(best.linked, vec![2]);
    assert_eq!(best.matched.len(), 1, "one entity row per scope and name");
    let links = store
        .entity_links(&query("t", "u", None), &best.matched, &[m1.id, m3.id, Uuid::now_v7()])
        .await
        .expect("links");
    assert_eq!(hits_for(links), vec![(m1.id, 0)], "m3 is linked to the other user's row");
    // By embedding when the name differs; "Swedish Kingdom" was merged into "Sweden".
    let hits = entity_memories(
        store,
        &query("t", "u", None),
        &[probe("nobody", &unit([0.0, 0.0, 0.0, 1.0])), probe("sverige", &sweden)],
        0.9,
    )
    .await
    .expect("hits");
    assert_eq!(hits_for(hits), sorted(vec![(m1.id, 1), (m2.id, 1)]));
    // Filters narrow.
    let hits =
        entity_memories(store, &query("t", "u", Some(json!({"kind": "b"}))), &[probe("caroline", &caroline)], 0.9)
            .await
            .expect("hits");
    assert_eq!(hits_for(hits), vec![(m2.id, 0)]);
    // Replacing m1's links removes them; deleting m2 removes its links and the now orphaned entities.
    relink(store, &[], &[m1.id], 0.95).await.expect("unlink");
    let hits =
        entity_memories(store, &query("t", "u", None), &[probe("caroline", &caroline)], 0.9).await.expect("hits");
    assert_eq!(hits_for(hits), vec![(m2.id, 0)]);
    delete(store, "t", &[m2.id]).await.expect("delete");
    let hits =
        entity_memories(store, &query("t", "u", None), &[probe("caroline", &caroline)], 0.9).await.expect("hits");
    assert!(hits.is_empty());
    // Re-linking m1 creates a fresh entity row for its scope.
    relink(store, &[link(&m1, "Caroline", &caroline)], &[m1.id], 0.95).await.expect("relink");
    let hits =
        entity_memories(store, &query("t", "u", None), &[probe("caroline", &caroline)], 0.9).await.expect("hits");
    assert_eq!(hits_for(hits), vec![(m1.id, 0)]);
    // The other user's entity was never touched.
    let hits =
        entity_memories(store, &query("t", "other", None), &[probe("caroline", &caroline)], 0.9).await.expect("hits");
    assert_eq!(hits_for(hits), vec![(m3.id, 0)]);
    delete_matching(store, &query("t", "other", None)).await.expect("delete scope");
    assert!(entity_memories(store, &query("t", "other", None), &[probe("caroline", &caroline)], 0.9)
        .await
        .expect("hits")
        .is_empty());
    // An expired memory is linked (and counted for the weights) but never a candidate unless
    // expired memories are asked for, however many there are ahead of the live one.
    let expired: Vec<MemoryRecord> = (0..5)
        .map(|index| {
            let mut memory = record("t", "u", &format!("Caroline, long ago {index}"), v.clone(), json!({}), 10 + index);
            memory.expiration_date = NaiveDate::from_ymd_opt(2000, 1, 1);
            memory
        })
        .collect();
    insert(store, &expired).await.expect("insert expired");
    let links: Vec<EntityLink> = expired.iter().map(|memory| link(memory, "Caroline", &caroline)).collect();
    relink(store, &links, &[], 0.95).await.expect("link expired");
    let live = store
        .entity_candidates(&query("t", "u", None), &[probe("caroline", &caroline)], 0.9, 1)
        .await
        .expect("candidates");
    assert_eq!(hits_for(live.hits), vec![(m1.id, 0)], "the newer expired memories are skipped");
    assert_eq!(live.linked, vec![6], "counts include expired memories, like the keyword statistics");
    let all = ScopedQuery { show_expired: true, ..query("t", "u", None) };
    let with_expired = entity_memories(store, &all, &[probe("caroline", &caroline)], 0.9).await.expect("hits");
    assert_eq!(with_expired.len(), 6);
}

/// A write commits rows, links and journal entries together or not at all; its inverse restores
/// what it changed; journal entries are read back oldest first and settled.
async fn check_writes_are_all_or_nothing(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([1.0, 0.0, 0.0, 0.0]);
    let kept = MemoryRecord {
        text_lemmatized: "kept".to_owned(),
        ..record("t", "u", "kept as it was", v.clone(), json!({"n": 1}), 0)
    };
    let doomed = record("t", "u", "about to be deleted", v.clone(), json!({}), 1);
    insert(store, &[kept.clone(), doomed.clone()]).await.expect("insert");
    let entity = |memory: &MemoryRecord, name: &str| EntityLink {
        memory_id: memory.id,
        tenant: memory.tenant.clone(),
        scope: memory.scope.clone(),
        name: name.to_owned(),
        normalized: name.to_lowercase(),
        kind: "proper".to_owned(),
        embedding: unit([0.0, 1.0, 0.0, 0.0]),
    };
    relink(store, &[entity(&kept, "Oslo"), entity(&doomed, "Oslo")], &[], 0.95).await.expect("link");
    let journal = |memory: Option<Uuid>, text: &str| mem0_core::store::JournalEntry {
        id: Uuid::now_v7(),
        tenant: "t".to_owned(),
        memory_id: memory,
        created_at: Utc::now(),
        payload: json!({"text": text}),
    };
    let fresh = record("t", "u", "never written", v.clone(), json!({}), 2);
    let missing = Uuid::now_v7();
    // An update of a missing row fails the whole write: no new row, no journal entry.
    let failing = WriteSet {
        tenant: "t".to_owned(),
        insert: vec![fresh.clone()],
        update: vec![MemoryRecord { id: missing, ..kept.clone() }],
        journal: vec![journal(Some(fresh.id), "ADD")],
        ..WriteSet::default()
    };
    assert!(matches!(store.apply(&failing).await, Err(Error::MemoryNotFound { .. })));
    assert!(store.get("t", fresh.id).await.expect("get").is_none(), "the insert was rolled back");
    let later = Utc::now() + Duration::minutes(1);
    assert!(store.journal(later, 10).await.expect("journal").is_empty(), "no journal entry either");
    // A guarded write refuses rows that changed since they were read.
    let stale = WriteSet { expect: vec![(kept.id, kept.updated_at - Duration::seconds(1))], ..WriteSet::update(&kept) };
    assert!(matches!(store.apply(&stale).await, Err(Error::Conflict(_))));
    let current = WriteSet { expect: vec![(kept.id, kept.updated_at)], ..WriteSet::update(&kept) };
    store.apply(&current).await.expect("unchanged since read");
    // A write touching everything, with a skipped missing delete target.
    let mut changed = kept.clone();
    changed.memory = "changed".to_owned();
    changed.text_lemmatized = "chang".to_owned();
    changed.embedding = unit([0.0, 0.0, 0.0, 1.0]).into();
    changed.metadata = Metadata::from_iter([("n".to_owned(), json!(2))]);
    // Searched once, so the embedded store caches the vector the write changes.
    store.search(&query("t", "u", None), &v, 10, 0.0).await.expect("warm the cache");
    let write = WriteSet {
        tenant: "t".to_owned(),
        insert: vec![fresh.clone()],
        update: vec![changed.clone()],
        delete: vec![doomed.id, missing],
        skip_missing: true,
        relink: vec![kept.id],
        links: vec![EntityLink { embedding: unit([0.0, 0.0, 1.0, 0.0]), ..entity(&fresh, "Bergen") }],
        merge_threshold: 0.95,
        journal: vec![journal(Some(fresh.id), "ADD"), journal(Some(missing), "DELETE of nothing")],
        ..WriteSet::default()
    };
    let applied = store.apply(&write).await.expect("apply");
    assert_eq!(applied.missing, vec![missing]);
    assert_eq!(applied.deleted.iter().map(|record| record.id).collect::<Vec<_>>(), vec![doomed.id]);
    assert_eq!(applied.replaced, vec![kept.clone()], "the row before the update");
    let mut previous: Vec<(Uuid, String)> =
        applied.previous_links.iter().map(|link| (link.memory_id, link.normalized.clone())).collect();
    previous.sort();
    let mut expected = vec![(kept.id, "oslo".to_owned()), (doomed.id, "oslo".to_owned())];
    expected.sort();
    assert_eq!(previous, expected);
    let entries = store.journal(later, 10).await.expect("journal");
    assert_eq!(entries.len(), 1, "the entry of the missing target was not written: {entries:?}");
    assert_eq!(entries[0].payload, json!({"text": "ADD"}));
    assert_eq!(store.get("t", kept.id).await.expect("get").expect("kept").memory, "changed");
    let probe = EntityProbe { normalized: "oslo".to_owned(), embedding: unit([0.0, 1.0, 0.0, 0.0]) };
    assert!(entity_memories(store, &query("t", "u", None), std::slice::from_ref(&probe), 0.99)
        .await
        .expect("hits")
        .is_empty());
    // The inverse puts everything back and settles the journal entry.
    let undo = write.inverse(&applied, entries.iter().map(|entry| entry.id).collect());
    store.apply(&undo).await.expect("undo");
    assert_eq!(store.get("t", kept.id).await.expect("get"), Some(kept.clone()));
    assert_eq!(store.get("t", doomed.id).await.expect("get"), Some(doomed.clone()));
    assert!(store.get("t", fresh.id).await.expect("get").is_none());
    let mut hits: Vec<Uuid> = entity_memories(store, &query("t", "u", None), &[probe], 0.99)
        .await
        .expect("hits")
        .into_iter()
        .map(|hit| hit.memory_id)
        .collect();
    hits.sort();
    let mut both = vec![kept.id, doomed.id];
    both.sort();
    assert_eq!(hits, both, "the links are back");
    assert!(store.journal(later, 10).await.expect("journal").is_empty(), "settled");
    // The embedding and the keyword index are back as well (not just the row's text).
    let hits = store.search(&query("t", "u", None), &v, 10, 0.0).await.expect("search");
    assert_eq!(hits.len(), 2, "search sees the restored rows");
    assert!(
        hits.iter().all(|hit| hit.score > 0.99),
        "restored embeddings: {:?}",
        hits.iter().map(|hit| hit.score).collect::<Vec<_>>()
    );
    let found = store
        .keyword_candidates(&query("t", "u", None), &["kept".to_owned(), "chang".to_owned()], 10)
        .await
        .expect("keyword");
    let terms: Vec<(Uuid, u64, u64)> = found
        .top
        .iter()
        .map(|(id, _)| {
            let df = |term: &str| found.stats.document_frequency.get(term).copied().unwrap_or(0);
            (*id, df("kept"), df("chang"))
        })
        .collect();
    assert_eq!(terms, vec![(kept.id, 1, 0)], "the keyword index is the original one");
}

/// With `unique_in`, inserts whose hash a matching memory already has are skipped, with their
/// links and journal entries; other scopes, other tenants and expired memories do not count; a
/// hash repeated in the write itself is stored (the caller dedups a batch).
async fn check_unique_inserts(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([1.0, 0.0, 0.0, 0.0]);
    let mut expired = record("t", "u", "was true once", v.clone(), json!({}), 0);
    expired.expiration_date = NaiveDate::from_ymd_opt(2026, 1, 1);
    let existing = record("t", "u", "likes tea", v.clone(), json!({}), 1);
    let elsewhere = [
        record("t", "w", "likes coffee", v.clone(), json!({}), 2),
        record("x", "u", "likes juice", v.clone(), json!({}), 3),
    ];
    insert(store, &[expired.clone(), existing.clone()]).await.expect("insert");
    insert(store, &elsewhere).await.expect("insert");
    let again = |text: &str, minutes| record("t", "u", text, v.clone(), json!({}), minutes);
    let (dup, fresh, coffee, juice, revived) = (
        again("likes tea", 10),
        again("likes milk", 11),
        again("likes coffee", 12),
        again("likes juice", 13),
        again("was true once", 14),
    );
    let link = EntityLink {
        memory_id: dup.id,
        tenant: "t".to_owned(),
        scope: dup.scope.clone(),
        name: "Tea".to_owned(),
        normalized: "tea".to_owned(),
        kind: "proper".to_owned(),
        embedding: unit([0.0, 1.0, 0.0, 0.0]),
    };
    let entry = |memory: Uuid| mem0_core::store::JournalEntry {
        id: Uuid::now_v7(),
        tenant: "t".to_owned(),
        memory_id: Some(memory),
        created_at: Utc::now(),
        payload: json!({}),
    };
    let write = WriteSet {
        tenant: "t".to_owned(),
        insert: vec![dup.clone(), fresh.clone(), coffee.clone(), juice.clone(), revived.clone()],
        links: vec![link],
        merge_threshold: 0.95,
        journal: vec![entry(dup.id), entry(fresh.id)],
        unique_in: Some(query("t", "u", None)),
        ..WriteSet::default()
    };
    let applied = store.apply(&write).await.expect("apply");
    assert_eq!(applied.skipped, vec![dup.id], "only the live duplicate of the same scope is skipped");
    assert!(store.get("t", dup.id).await.expect("get").is_none());
    for kept in [&fresh, &coffee, &juice, &revived] {
        assert!(store.get("t", kept.id).await.expect("get").is_some(), "{} stored", kept.memory);
    }
    let probe = EntityProbe { normalized: "tea".to_owned(), embedding: unit([0.0, 1.0, 0.0, 0.0]) };
    let hits = entity_memories(store, &query("t", "u", None), &[probe], 0.9).await.expect("entities");
    assert!(hits.is_empty(), "the skipped insert's link is not written: {hits:?}");
    let later = Utc::now() + Duration::minutes(1);
    let journal = store.journal(later, 10).await.expect("journal");
    assert_eq!(
        journal.iter().map(|entry| entry.memory_id).collect::<Vec<_>>(),
        vec![Some(fresh.id)],
        "no entry for the skipped"
    );
}

/// With `skip_existing_ids` (imports), inserts whose id is stored already, in any tenant, are
/// skipped with their links; undoing the write removes only what it inserted.
async fn check_inserts_skip_existing_ids(store: &dyn VectorStore) {
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let v = unit([1.0, 0.0, 0.0, 0.0]);
    let theirs = record("x", "u", "their memory", v.clone(), json!({}), 0);
    let mine = record("t", "u", "my memory", v.clone(), json!({}), 1);
    insert(store, &[theirs.clone(), mine.clone()]).await.expect("insert");
    let taken =
        MemoryRecord { tenant: "t".to_owned(), memory: "an import of the same id".to_owned(), ..theirs.clone() };
    let again = MemoryRecord { memory: "my memory, imported again".to_owned(), ..mine.clone() };
    let fresh = record("t", "u", "a new memory", v.clone(), json!({}), 2);
    let link = EntityLink {
        memory_id: taken.id,
        tenant: "t".to_owned(),
        scope: taken.scope.clone(),
        name: "Tea".to_owned(),
        normalized: "tea".to_owned(),
        kind: "imported".to_owned(),
        embedding: unit([0.0, 1.0, 0.0, 0.0]),
    };
    let write = WriteSet {
        tenant: "t".to_owned(),
        insert: vec![taken.clone(), again.clone(), fresh.clone()],
        links: vec![link],
        merge_threshold: 0.95,
        skip_existing_ids: true,
        ..WriteSet::default()
    };
    let applied = store.apply(&write).await.expect("apply");
    let mut skipped = applied.skipped.clone();
    skipped.sort();
    let mut expected = vec![theirs.id, mine.id];
    expected.sort();
    assert_eq!(skipped, expected, "both stored ids are skipped");
    assert_eq!(store.get("x", theirs.id).await.expect("get").map(|record| record.memory), Some(theirs.memory.clone()));
    assert!(store.get("t", theirs.id).await.expect("get").is_none(), "not moved to another tenant");
    assert_eq!(store.get("t", mine.id).await.expect("get").map(|record| record.memory), Some(mine.memory.clone()));
    assert!(store.get("t", fresh.id).await.expect("get").is_some());
    let probe = EntityProbe { normalized: "tea".to_owned(), embedding: unit([0.0, 1.0, 0.0, 0.0]) };
    let hits = entity_memories(store, &query("t", "u", None), &[probe], 0.9).await.expect("entities");
    assert!(hits.is_empty(), "the skipped insert's link is not written: {hits:?}");
    // The undo of this write (a failed history delivery) removes the new memory only.
    store.apply(&write.inverse(&applied, Vec::new())).await.expect("undo");
    assert!(store.get("t", fresh.id).await.expect("get").is_none());
    assert!(store.get("t", mine.id).await.expect("get").is_some(), "the memory that was there stays");
    assert!(store.get("x", theirs.id).await.expect("get").is_some(), "the other tenant's stays");
}

macro_rules! conformance_suite {
    ($backend:ident, $open:expr) => {
        mod $backend {
            use super::*;

            #[tokio::test]
            async fn tenancy_and_crud() {
                let (store, _guard) = $open;
                check_tenancy_and_crud(&store).await;
            }

            #[tokio::test]
            async fn search_is_exact_top_k() {
                let (store, _guard) = $open;
                check_search_is_exact_top_k(&store).await;
            }

            #[tokio::test]
            async fn listing_order_pages_and_expiration() {
                let (store, _guard) = $open;
                check_listing_order_pages_and_expiration(&store).await;
            }

            #[tokio::test]
            async fn filters() {
                let (store, _guard) = $open;
                check_filters(&store).await;
            }

            #[tokio::test]
            async fn scope_listing() {
                let (store, _guard) = $open;
                check_scope_listing(&store).await;
            }

            #[tokio::test]
            async fn state_chains() {
                let (store, _guard) = $open;
                check_state_chains(&store).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_writers_of_one_key() {
                let (store, _guard) = $open;
                check_concurrent_writers_of_one_key(&store).await;
            }

            #[tokio::test]
            async fn reads() {
                let (store, _guard) = $open;
                check_reads(&store).await;
            }

            #[tokio::test]
            async fn keyword_index() {
                let (store, _guard) = $open;
                check_keyword_index(&store).await;
            }

            #[tokio::test]
            async fn entity_links() {
                let (store, _guard) = $open;
                check_entity_links(&store).await;
            }

            #[tokio::test]
            async fn writes_are_all_or_nothing() {
                let (store, _guard) = $open;
                check_writes_are_all_or_nothing(&store).await;
            }

            #[tokio::test]
            async fn unique_inserts() {
                let (store, _guard) = $open;
                check_unique_inserts(&store).await;
            }

            #[tokio::test]
            async fn inserts_skip_existing_ids() {
                let (store, _guard) = $open;
                check_inserts_skip_existing_ids(&store).await;
            }

            #[tokio::test]
            async fn dimension_mismatch() {
                let (store, _guard) = $open;
                check_dimension_mismatch(&store).await;
            }
        }
    };
}

async fn open_sqlite() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("memories.db")).await.expect("open");
    (store, dir)
}

conformance_suite!(sqlite, open_sqlite().await);

/// The embedded store with its per-scope search index off: every search through SQL.
async fn open_sqlite_without_index() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open_with_caches(&dir.path().join("memories.db"), 0, 0).await.expect("open");
    (store, dir)
}

conformance_suite!(sqlite_without_index, open_sqlite_without_index().await);

/// A small deterministic generator (no dependency for a test's dice).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

const WORDS: &[&str] = &["violin", "lisbon", "tea", "peanut", "bike", "curry", "chess", "osaka", "jazz", "camera"];
const NAMES: &[&str] = &["Maria", "Tom", "Aiko", "Lars"];

fn name_vector(name: &str) -> Vec<f32> {
    let index = NAMES.iter().position(|known| *known == name).unwrap_or(0) as f32;
    unit([1.0, index, 0.5, -index])
}

/// A random memory of one of a few scopes (two tenants, a user with and without an agent, an
/// agent alone), some expired, with a few analysed words.
fn random_record(dice: &mut Dice) -> MemoryRecord {
    let tenant = ["t", "t", "t", "t2"][dice.below(4)];
    let words: Vec<&str> = (0..1 + dice.below(4)).map(|_| WORDS[dice.below(WORDS.len())]).collect();
    let text = words.join(" ");
    let vector = unit([1.0 + dice.below(5) as f32, dice.below(7) as f32, dice.below(3) as f32, 0.5]);
    let kind = ["a", "b"][dice.below(2)];
    let mut memory = record(tenant, "u1", &text, vector, json!({ "kind": kind }), 0);
    memory.scope = match dice.below(4) {
        0 => Scope::new(Some("u1"), Some("a1"), None),
        1 => Scope::new(Some("u2"), None, None),
        2 => Scope::new(None, Some("a1"), None),
        _ => Scope::new(Some("u1"), None, None),
    }
    .expect("scope");
    memory.text_lemmatized = text;
    if dice.below(6) == 0 {
        memory.expiration_date = NaiveDate::from_ymd_opt(2000, 1, 1);
    }
    memory
}

fn random_links(dice: &mut Dice, memory: &MemoryRecord) -> Vec<EntityLink> {
    (0..dice.below(3))
        .map(|_| {
            let name = NAMES[dice.below(NAMES.len())];
            EntityLink {
                memory_id: memory.id,
                tenant: memory.tenant.clone(),
                scope: memory.scope.clone(),
                name: name.to_owned(),
                normalized: name.to_lowercase(),
                kind: "proper".to_owned(),
                embedding: name_vector(name),
            }
        })
        .collect()
}

/// One random write: inserts with links, an update (new text, vector, expiration or status), a
/// delete, or new links for a memory.
fn random_write(dice: &mut Dice, live: &mut Vec<MemoryRecord>) -> WriteSet {
    match (dice.below(10), live.is_empty()) {
        (0..=4, _) | (_, true) => {
            let records: Vec<MemoryRecord> = (0..1 + dice.below(4)).map(|_| random_record(dice)).collect();
            let links = records.iter().flat_map(|memory| random_links(dice, memory)).collect();
            live.extend(records.iter().cloned());
            WriteSet { links, merge_threshold: 0.99, ..WriteSet::insert(&records) }
        }
        (5..=6, _) => {
            let at = dice.below(live.len());
            let mut memory = random_record(dice);
            memory.id = live[at].id;
            memory.tenant = live[at].tenant.clone();
            memory.scope = live[at].scope.clone();
            if dice.below(3) == 0 {
                memory.state.status = MemoryStatus::Superseded;
            }
            live[at] = memory.clone();
            WriteSet::update(&memory)
        }
        (7..=8, _) => {
            let memory = live.swap_remove(dice.below(live.len()));
            WriteSet::delete(&memory.tenant, &[memory.id])
        }
        _ => {
            let memory = live[dice.below(live.len())].clone();
            WriteSet::relink(&random_links(dice, &memory), &[memory.id], 0.99)
        }
    }
}

/// Every query shape a search asks the store: scopes, expiration, supersession, a filter.
fn index_queries() -> Vec<ScopedQuery> {
    let mut queries = Vec::new();
    for tenant in ["t", "t2"] {
        for (user, agent) in [(Some("u1"), None), (Some("u1"), Some("a1")), (None, Some("a1")), (Some("u2"), None)] {
            for (show_expired, include_superseded) in [(false, false), (true, true)] {
                queries.push(ScopedQuery {
                    scope: Scope::new(user, agent, None).expect("scope"),
                    show_expired,
                    include_superseded,
                    ..query(tenant, "u1", None)
                });
            }
        }
    }
    queries.push(query("t", "u1", Some(json!({"kind": "a"}))));
    queries
}

/// What each retriever finds for `query`, in a comparable form (entity rows have store-made
/// ids, so matches are compared by probe; scores rounded against summation order).
async fn retrieved(store: &dyn VectorStore, query: &ScopedQuery) -> Vec<String> {
    retrieved_at(store, query, 1e6).await
}

/// The same with dense scores rounded to `1 / dense_scale` (pgvector's cosine distance and the
/// index's dot product of unit vectors differ in the 7th digit).
async fn retrieved_at(store: &dyn VectorStore, query: &ScopedQuery, dense_scale: f64) -> Vec<String> {
    let vector = unit([2.0, 3.0, 1.0, 0.5]);
    let mut dense: Vec<(Uuid, i64)> = store
        .search(query, &vector, 10_000, 0.0)
        .await
        .expect("dense")
        .iter()
        .map(|hit| (hit.record.id, (f64::from(hit.score) * dense_scale).round() as i64))
        .collect();
    dense.sort();
    let terms: Vec<String> = ["violin", "tea", "chess", "absent"].iter().map(|term| (*term).to_owned()).collect();
    let keywords = store.keyword_candidates(query, &terms, 10_000).await.expect("keywords");
    let mut top: Vec<(Uuid, i64)> =
        keywords.top.iter().map(|(id, score)| (*id, (score * 1e9).round() as i64)).collect();
    top.sort();
    let mut frequencies: Vec<(String, u64)> = keywords.stats.document_frequency.into_iter().collect();
    frequencies.sort();
    let probes: Vec<EntityProbe> = ["maria", "aiko", "nobody"]
        .iter()
        .map(|name| EntityProbe { normalized: (*name).to_owned(), embedding: name_vector("Maria") })
        .collect();
    let entities = store.entity_candidates(query, &probes, 0.999, 10_000).await.expect("entities");
    let mut matched: Vec<Vec<usize>> = entities.matched.iter().map(|(_, probes)| probes.clone()).collect();
    matched.sort();
    let mut hits: Vec<(Uuid, usize)> = entities.hits.iter().map(|hit| (hit.memory_id, hit.probe)).collect();
    hits.sort();
    let best = store.search(query, &vector, 3, 0.0).await.expect("dense top 3");
    // Distinct, as the retriever asks (the SQL answers once per chunk an id is listed in).
    let mut ids: Vec<Uuid> = dense.iter().map(|(id, _)| *id).chain(top.iter().map(|(id, _)| *id)).collect();
    ids.sort();
    ids.dedup();
    let mut links: Vec<(Uuid, usize)> = store
        .entity_links(query, &entities.matched, &ids)
        .await
        .expect("links")
        .iter()
        .map(|hit| (hit.memory_id, hit.probe))
        .collect();
    links.sort();
    vec![
        format!("links {links:?}"),
        format!("dense {dense:?}"),
        // Ids where scores are exact (the same arithmetic on both sides, ties broken alike).
        if dense_scale >= 1e6 {
            format!("dense top 3 {:?}", best.iter().map(|hit| hit.record.id).collect::<Vec<_>>())
        } else {
            let scores: Vec<i64> = best.iter().map(|hit| (f64::from(hit.score) * dense_scale).round() as i64).collect();
            format!("dense top 3 scores {scores:?}")
        },
        format!("keyword stats {} {:.9} {frequencies:?}", keywords.stats.doc_count, keywords.stats.avg_doc_len),
        format!("keyword top {top:?}"),
        format!("entities {matched:?} {:?} {hits:?}", entities.linked),
    ]
}

/// The per-scope index answers every query as the SQL does, through a random run of inserts,
/// updates, deletes, relinks and a reset, checked after every few writes.
#[tokio::test]
async fn sqlite_index_answers_as_sql_through_random_writes() {
    let (indexed, _guard) = open_sqlite().await;
    let (plain, _plain_guard) = open_sqlite_without_index().await;
    // Room for 60 memories in all: scopes are evicted, and the larger ones searched through SQL.
    let small_dir = tempfile::tempdir().expect("temp dir");
    let small = SqliteStore::open_with_caches(&small_dir.path().join("memories.db"), 60, 60).await.expect("open");
    for store in [&indexed, &plain, &small] {
        store.ensure_dimension(DIM, "test").await.expect("dimension");
    }
    let mut dice = Dice(7);
    let mut live = Vec::new();
    for step in 0..400 {
        let write = random_write(&mut dice, &mut live);
        for store in [&indexed, &plain, &small] {
            store.apply(&write).await.expect("write");
        }
        if step == 250 {
            for store in [&indexed, &plain, &small] {
                store.reset(Some("t2")).await.expect("reset");
            }
            live.retain(|memory| memory.tenant != "t2");
        }
        if step % 20 == 19 {
            for query in index_queries() {
                let want = retrieved(&plain, &query).await;
                for got in [retrieved(&indexed, &query).await, retrieved(&small, &query).await] {
                    for (want, got) in want.iter().zip(&got) {
                        assert_eq!(got, want, "step {step}, query {query:?}");
                    }
                }
            }
        }
    }
}

/// Writers and searchers at once on one indexed store: afterwards its answers are those of a
/// handle on the same file that searches through SQL (no write was missed by the index).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_index_misses_no_write_made_during_searches() {
    let (indexed, guard) = open_sqlite().await;
    indexed.ensure_dimension(DIM, "test").await.expect("dimension");
    // Scopes of a few thousand memories, so searches of the index also run as blocking work.
    let mut dice = Dice(99);
    let many: Vec<MemoryRecord> = (0..6000).map(|_| random_record(&mut dice)).collect();
    insert(&indexed, &many).await.expect("insert");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for seed in 0..4u64 {
        let store = indexed.clone();
        writers.push(tokio::spawn(async move {
            let mut dice = Dice(seed + 100);
            let mut live = Vec::new();
            for _ in 0..150 {
                store.apply(&random_write(&mut dice, &mut live)).await.expect("write");
            }
        }));
    }
    let mut searchers = Vec::new();
    for _ in 0..3 {
        let (store, done) = (indexed.clone(), std::sync::Arc::clone(&done));
        searchers.push(tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for query in index_queries() {
                    retrieved(&store, &query).await;
                }
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for searcher in searchers {
        searcher.await.expect("searcher");
    }
    let plain = SqliteStore::open_with_caches(&guard.path().join("memories.db"), 0, 0).await.expect("open");
    for query in index_queries() {
        let (got, want) = (retrieved(&indexed, &query).await, retrieved(&plain, &query).await);
        for (got, want) in got.iter().zip(&want) {
            let first = got.chars().zip(want.chars()).position(|(a, b)| a != b).unwrap_or(0);
            let around = |text: &str| text.chars().skip(first.saturating_sub(80)).take(200).collect::<String>();
            assert!(got == want, "query {query:?}: {} …{}… instead of …{}…", &want[..12], around(got), around(want));
        }
    }
}

async fn open_pg() -> (mem0_core::store::PgVectorStore, PgDatabase) {
    let database = PgDatabase::create().await;
    let store = mem0_core::store::PgVectorStore::connect(&database.url(), &mem0_core::store::PgVectorConfig::default())
        .await
        .expect("connect and migrate");
    (store, database)
}

conformance_suite!(pgvector, open_pg().await);

/// Another handle on the test database of `guard`, as a second server would have.
async fn open_pg_handle(guard: &PgDatabase, index_max_memories: usize) -> mem0_core::store::PgVectorStore {
    let config = mem0_core::store::PgVectorConfig { index_max_memories, ..Default::default() };
    mem0_core::store::PgVectorStore::connect(&guard.url(), &config).await.expect("connect")
}

/// The Postgres store with its per-scope search index and row cache off: every read in SQL.
async fn open_pg_without_index() -> (mem0_core::store::PgVectorStore, PgDatabase) {
    let database = PgDatabase::create().await;
    let config =
        mem0_core::store::PgVectorConfig { index_max_memories: 0, record_cache_entries: 0, ..Default::default() };
    let store = mem0_core::store::PgVectorStore::connect(&database.url(), &config).await.expect("connect");
    (store, database)
}

/// Pruning the change feed never passes a transaction still open (indexes positioned before it
/// would otherwise be rebuilt on every search until it ended), and moves the horizon past what
/// it removed once that transaction is over.
#[tokio::test]
async fn pgvector_change_feed_pruning_waits_for_open_transactions() {
    let (store, _guard) = open_pg().await;
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let horizon = |store: &mem0_core::store::PgVectorStore| {
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("select xid from memory_changes_horizon").fetch_one(&pool).await.expect("h")
        }
    };
    insert(&store, &[record("t", "u", "before", unit([1.0, 0.0, 0.0, 0.0]), json!({}), 0)]).await.expect("insert");
    // A transaction holding an id, left open (an idle session in a transaction).
    let mut open = store.pool().begin().await.expect("begin");
    let open_xid: i64 =
        sqlx::query_scalar("select pg_current_xact_id()::text::int8").fetch_one(&mut *open).await.expect("xid");
    insert(&store, &[record("t", "u", "after", unit([0.0, 1.0, 0.0, 0.0]), json!({}), 1)]).await.expect("insert");
    sqlx::query("update memory_changes set recorded_at = recorded_at - interval '1 hour'")
        .execute(store.pool())
        .await
        .expect("age the feed");
    // Tests running beside this one on the same cluster may hold its xmin back for a moment.
    let mut pruned = 0;
    for _ in 0..100 {
        pruned += store.prune_change_feed().await.expect("prune");
        if pruned > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(pruned, 1, "only the change from before the open one");
    assert_eq!(store.prune_change_feed().await.expect("prune"), 0, "not the open one's");
    assert!(horizon(&store).await <= open_xid, "the horizon stays at or below the open transaction");
    // An index built now is positioned at the open transaction and stays usable.
    let found = store.search(&query("t", "u", None), &unit([0.0, 1.0, 0.0, 0.0]), 1, 0.0).await.expect("search");
    assert_eq!(found[0].record.memory, "after");
    open.rollback().await.expect("rollback");
    assert_eq!(store.prune_change_feed().await.expect("prune"), 1);
    assert!(horizon(&store).await > open_xid);
    let remaining: i64 =
        sqlx::query_scalar("select count(*) from memory_changes").fetch_one(store.pool()).await.expect("count");
    assert_eq!(remaining, 0);
}

conformance_suite!(pgvector_without_index, open_pg_without_index().await);

/// Three servers on one database (indexed, searching through SQL, indexing 60 memories at most)
/// answer every query alike through a random run of writes made by any of them, a reset, and a
/// pruned change feed (indexes older than its horizon are rebuilt).
#[tokio::test]
async fn pgvector_index_answers_as_sql_through_random_writes_of_several_servers() {
    let (indexed, guard) = open_pg().await;
    let plain = open_pg_handle(&guard, 0).await;
    let small = open_pg_handle(&guard, 60).await;
    indexed.ensure_dimension(DIM, "test").await.expect("dimension");
    let servers = [&indexed, &plain, &small];
    let mut dice = Dice(7);
    let mut live = Vec::new();
    for step in 0..400 {
        let write = random_write(&mut dice, &mut live);
        servers[step % 3].apply(&write).await.expect("write");
        if step == 250 {
            plain.reset(Some("t2")).await.expect("reset");
            live.retain(|memory| memory.tenant != "t2");
        }
        if step == 330 {
            // What pruning does to changes older than every index.
            sqlx::query(
                "with gone as (delete from memory_changes returning xid) update memory_changes_horizon \
                 set xid = greatest(xid, coalesce((select max(xid) + 1 from gone), 0))",
            )
            .execute(plain.pool())
            .await
            .expect("prune");
        }
        if step % 20 == 19 || step == 331 {
            for query in index_queries() {
                let want = retrieved_at(&plain, &query, 1e4).await;
                // As one search asks: its calls may share what the first one's look learned.
                let searching = ScopedQuery { fresh_since: Some(Instant::now()), ..query.clone() };
                for got in [
                    retrieved_at(&indexed, &query, 1e4).await,
                    retrieved_at(&small, &query, 1e4).await,
                    retrieved_at(&indexed, &searching, 1e4).await,
                ] {
                    for (want, got) in want.iter().zip(&got) {
                        assert_eq!(got, want, "step {step}, query {query:?}");
                    }
                }
            }
            // Rows read by id are the stored ones (embedding included), whether or not a row
            // cache or an index holds an older version: compared with a fresh handle's.
            let fresh = open_pg_handle(&guard, 0).await;
            for tenant in ["t", "t2"] {
                let ids: Vec<Uuid> = live.iter().filter(|memory| memory.tenant == tenant).map(|m| m.id).collect();
                let sorted = |mut records: Vec<MemoryRecord>| {
                    records.sort_by_key(|record| record.id);
                    records
                };
                let want = sorted(fresh.get_many(tenant, &ids).await.expect("rows"));
                assert_eq!(want.len(), ids.len());
                for server in servers {
                    assert!(sorted(server.get_many(tenant, &ids).await.expect("rows")) == want, "step {step}");
                    // Candidates of a search (its scope's index answers for the ids it holds).
                    let searching = ScopedQuery { fresh_since: Some(Instant::now()), ..query(tenant, "u1", None) };
                    let found = server.get_candidates(&searching, &ids).await.expect("candidates");
                    let found = sorted(found.into_iter().map(std::sync::Arc::unwrap_or_clone).collect());
                    assert!(found == want, "step {step}");
                }
            }
            fresh.pool().close().await;
        }
    }
    let feed: i64 = sqlx::query_scalar("select count(*) from memory_changes").fetch_one(plain.pool()).await.expect("n");
    assert!(feed > 0, "writes after the prune are in the feed");
}

/// Writers on two servers while a third searches: afterwards the searching server's index
/// answers as SQL does (no write another server committed during its searches was missed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgvector_index_misses_no_write_made_during_searches() {
    let (indexed, guard) = open_pg().await;
    indexed.ensure_dimension(DIM, "test").await.expect("dimension");
    let other = open_pg_handle(&guard, 0).await;
    let mut dice = Dice(99);
    // Scopes of a few thousand memories, so searches of the index also run as blocking work.
    let many: Vec<MemoryRecord> = (0..6000).map(|_| random_record(&mut dice)).collect();
    for chunk in many.chunks(500) {
        insert(&indexed, chunk).await.expect("insert");
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for seed in 0..4u64 {
        let store = if seed % 2 == 0 { indexed.clone() } else { other.clone() };
        let searcher = indexed.clone();
        writers.push(tokio::spawn(async move {
            let mut dice = Dice(seed + 100);
            let mut live = Vec::new();
            for _ in 0..100 {
                let write = random_write(&mut dice, &mut live);
                store.apply(&write).await.expect("write");
                // A memory just inserted, on either server, is found by the indexed one at once
                // (by a search that began after the insert, sharing looks as searches do).
                if let Some(memory) = write.insert.first() {
                    let shown = ScopedQuery {
                        scope: memory.scope.clone(),
                        show_expired: true,
                        include_superseded: true,
                        fresh_since: Some(Instant::now()),
                        ..query(&memory.tenant, "u1", None)
                    };
                    let hits = searcher.search(&shown, &memory.embedding, 10_000, 0.0).await.expect("search");
                    assert!(hits.iter().any(|hit| hit.record.id == memory.id), "a committed insert was missed");
                    let rows = searcher.get_candidates(&shown, &[memory.id]).await.expect("candidates");
                    assert!(rows.iter().any(|row| row.id == memory.id && row.memory == memory.memory));
                }
            }
        }));
    }
    let mut searchers = Vec::new();
    for _ in 0..3 {
        let (store, done) = (indexed.clone(), std::sync::Arc::clone(&done));
        searchers.push(tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for query in index_queries() {
                    retrieved(&store, &query).await;
                }
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for searcher in searchers {
        searcher.await.expect("searcher");
    }
    for query in index_queries() {
        let (got, want) = (retrieved_at(&indexed, &query, 1e4).await, retrieved_at(&other, &query, 1e4).await);
        for (got, want) in got.iter().zip(&want) {
            let first = got.chars().zip(want.chars()).position(|(a, b)| a != b).unwrap_or(0);
            let around = |text: &str| text.chars().skip(first.saturating_sub(80)).take(200).collect::<String>();
            assert!(got == want, "query {query:?}: {} …{}… instead of …{}…", &want[..12], around(got), around(want));
        }
    }
}

/// A small scope inside a larger table through the HNSW path (exact ranking switched off): the
/// iterative scan must still return a full top-k, and nearly the exact one.
#[tokio::test]
async fn pgvector_hnsw_path_returns_a_full_top_k_for_a_small_scope() {
    let (exact_store, guard) = open_pg().await;
    let url = format!("{}/{}", guard.admin_url.rsplit_once('/').expect("url").0, guard.name);
    let config = mem0_core::store::PgVectorConfig { exact_search_max_rows: 0, ..Default::default() };
    let hnsw_store = mem0_core::store::PgVectorStore::connect(&url, &config).await.expect("connect");
    hnsw_store.ensure_dimension(DIM, "test").await.expect("dimension");
    let mut records = Vec::new();
    for index in 0..3000 {
        let angle = index as f32 * 0.0021;
        let user = if index % 100 == 0 { "small" } else { "big" };
        records.push(record(
            "t",
            user,
            &format!("m{index}"),
            unit([angle.cos(), angle.sin(), 0.3, (index % 7) as f32 * 0.01]),
            json!({}),
            0,
        ));
    }
    for chunk in records.chunks(500) {
        insert(&hnsw_store, chunk).await.expect("insert");
    }
    sqlx::query("analyze memories").execute(hnsw_store.pool()).await.expect("analyze");
    let probe = unit([0.2, 1.0, 0.3, 0.0]);
    let approximate = hnsw_store.search(&query("t", "small", None), &probe, 10, 0.0).await.expect("search");
    let exact = exact_store.search(&query("t", "small", None), &probe, 10, 0.0).await.expect("search");
    assert_eq!(approximate.len(), 10, "a full top-k, not what survived a post-filter");
    assert_eq!(exact.len(), 10);
    let exact_ids: HashSet<Uuid> = exact.iter().map(|hit| hit.record.id).collect();
    let overlap = approximate.iter().filter(|hit| exact_ids.contains(&hit.record.id)).count();
    assert!(overlap >= 9, "recall@10 {overlap}/10");
}

/// `import` (COPY + index rebuild) stores exactly what `insert` would: awkward text survives the
/// COPY escaping, the keyword index follows, the HNSW index is back afterwards.
/// A real embedding (384 dimensions, 1.5 KB) with a memory of a few hundred characters, as most
/// extracted facts are: the row passes the TOAST threshold, and the embedding (the largest value)
/// would be the one moved out of the row unless its storage says otherwise. It stays in the row,
/// so an exact ranking never reads vectors from the TOAST table.
#[tokio::test]
async fn pgvector_embeddings_stay_in_the_row() {
    const REAL_DIM: usize = 384;
    let (store, _guard) = open_pg().await;
    store.ensure_dimension(REAL_DIM, "test").await.expect("dimension");
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // Text that does not compress: about 700 characters of random words.
    let text: String = (0..100).map(|_| format!("{:06x} ", next() % 0xff_ffff)).collect();
    let mut embedding: Vec<f32> = (0..REAL_DIM).map(|_| (next() % 1000) as f32 - 500.0).collect();
    let norm = embedding.iter().map(|value| value * value).sum::<f32>().sqrt();
    embedding.iter_mut().for_each(|value| *value /= norm);
    let long = record("t", "u", &text, embedding.clone(), json!({}), 0);
    insert(&store, std::slice::from_ref(&long)).await.expect("insert");
    let (embedding_out, row_size): (bool, i32) = sqlx::query_as(
        "select pg_column_toast_chunk_id(embedding) is not null, pg_column_size(memories.*) from memories \
         where id = $1",
    )
    .bind(long.id)
    .fetch_one(store.pool())
    .await
    .expect("toast");
    assert!(text.len() >= 700);
    assert!(!embedding_out, "the embedding stays in the row (row of {row_size} bytes)");
    let hits = store.search(&query("t", "u", None), &embedding, 5, 0.0).await.expect("search");
    assert_eq!(hits.iter().map(|hit| hit.record.id).collect::<Vec<_>>(), [long.id]);
    assert_eq!(hits[0].record.memory, text);
}

#[tokio::test]
async fn pgvector_import_round_trips_awkward_rows() {
    let (store, _guard) = open_pg().await;
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let mut tricky = record(
        "t",
        "u",
        "tab\there, newline\nthere, backslash \\ and \\N, quote \" and 成都",
        unit([1.0, 0.0, 0.0, 0.0]),
        json!({"path": "C:\\temp", "note": "line\nbreak"}),
        0,
    );
    tricky.text_lemmatized = "tab newlin backslash n quot 成都".into();
    tricky.entities = vec!["O\"Neil \\ Co".into(), "成都".into(), "a,b".into()];
    tricky.linked_memory_ids = vec![Uuid::now_v7()];
    tricky.expiration_date = NaiveDate::from_ymd_opt(2099, 1, 2);
    tricky.attributed_to = Some("user".into());
    let plain = record("t", "u", "plain", unit([0.0, 1.0, 0.0, 0.0]), json!({}), 1);
    let report = store.import(&[tricky.clone(), plain.clone()], "64MB").await.expect("import");
    assert_eq!(report.rows, 2);
    assert_eq!(store.get("t", tricky.id).await.expect("get"), Some(tricky.clone()));
    assert_eq!(store.get("t", plain.id).await.expect("get"), Some(plain.clone()));
    // The triggers index imported rows: postings and statistics.
    let found = store.keyword_candidates(&query("t", "u", None), &["成都".to_owned()], 10).await.expect("keyword");
    assert_eq!(found.top.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![tricky.id]);
    assert_eq!(found.stats.doc_count, 2);
    let hits = store.search(&query("t", "u", None), &unit([1.0, 0.0, 0.0, 0.0]), 1, 0.0).await.expect("search");
    assert_eq!(hits[0].record.id, tricky.id);
    let indexed: i64 =
        sqlx::query_scalar("select count(*) from pg_indexes where indexname = 'memories_embedding_hnsw'")
            .fetch_one(store.pool())
            .await
            .expect("index lookup");
    assert_eq!(indexed, 1, "the HNSW index is rebuilt");
}

/// Concurrent writers naming the same new entity in one scope end up with one entity row (the
/// unique index and the upsert), on Postgres where writers really run at once.
#[tokio::test]
async fn pgvector_concurrent_links_create_one_entity_row() {
    let (store, _database) = open_pg().await;
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let memories: Vec<MemoryRecord> = (0..24)
        .map(|index| record("t", "u", &format!("Zanzibar note {index}"), unit([1.0, 0.0, 0.0, 0.0]), json!({}), index))
        .collect();
    insert(&store, &memories).await.expect("insert");
    let writers = memories.iter().map(|memory| {
        let store = store.clone();
        let link = EntityLink {
            memory_id: memory.id,
            tenant: "t".to_owned(),
            scope: memory.scope.clone(),
            name: "Zanzibar".to_owned(),
            normalized: "zanzibar".to_owned(),
            kind: "proper".to_owned(),
            embedding: unit([0.0, 0.0, 0.0, 1.0]),
        };
        tokio::spawn(async move { relink(&store, &[link], &[], 0.95).await })
    });
    for result in futures::future::join_all(writers).await {
        result.expect("task").expect("link");
    }
    let rows: i64 = sqlx::query_scalar("select count(*) from memories_entities where normalized = 'zanzibar'")
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(rows, 1, "one entity row per scope and name");
    let links: i64 =
        sqlx::query_scalar("select count(*) from memory_entity_links").fetch_one(store.pool()).await.expect("count");
    assert_eq!(links, 24, "every memory is linked to it");
}

/// Operations cut off at every point of their transactions never leave a pooled connection inside
/// a transaction (sqlx's `begin()` is not cancel-safe on Postgres): afterwards no backend is idle
/// in a transaction and every operation on the one pooled connection works.
#[tokio::test]
async fn pgvector_cancelled_operations_never_poison_the_pool() {
    let database = PgDatabase::create().await;
    let config = mem0_core::store::PgVectorConfig { max_connections: 1, ..Default::default() };
    let store = mem0_core::store::PgVectorStore::connect(&database.url(), &config).await.expect("connect");
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let seeded: Vec<MemoryRecord> = (0..20)
        .map(|index| {
            record("t", "u", &format!("seeded memory {index}"), unit([1.0, index as f32, 0.0, 0.0]), json!({}), index)
        })
        .collect();
    insert(&store, &seeded).await.expect("insert");
    let admin = sqlx::PgPool::connect(&database.admin_url).await.expect("admin");
    let database_name = database.name.clone();
    // A cut can land anywhere: during the pool's health check, while BEGIN is in flight, between
    // statements, or at the commit (a current-thread runtime polls the socket every few dozen
    // yields, so a few hundred poll counts cover every step).
    for round in 0..300 {
        let polls = round + 1;
        match round % 3 {
            0 => cancel_after(store.search(&query("t", "u", None), &unit([1.0, 0.0, 0.0, 0.0]), 5, 0.0), polls).await,
            1 => cancel_after(store.keyword_candidates(&query("t", "u", None), &["seed".to_owned()], 10), polls).await,
            _ => {
                let extra =
                    record("t", "u", &format!("written in round {round}"), unit([0.0, 1.0, 0.0, 0.0]), json!({}), 100);
                cancel_after(insert(&store, &[extra]), polls).await;
            }
        }
        // Wait until the connection is back in the pool (or closed), without using it: a later
        // BEGIN ... COMMIT on it would end a stale transaction and hide it.
        for _ in 0..1_000_000 {
            if store.pool().num_idle() == store.pool().size() as usize {
                break;
            }
            tokio::task::yield_now().await;
        }
        // A connection the pool closed because it was inside a transaction has been sent
        // `Terminate`, but its backend shows as idle in transaction until it has exited (a few
        // milliseconds); one the pool kept would stay so for ever.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let stale: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_activity where datname = $1 and state like 'idle in transaction%'",
            )
            .bind(&database_name)
            .fetch_one(&admin)
            .await
            .expect("activity");
            if stale == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: a pooled connection was left inside a transaction"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // And every operation works on the pool afterwards.
        let hits = store.search(&query("t", "u", None), &unit([1.0, 0.0, 0.0, 0.0]), 3, 0.0).await.expect("search");
        assert_eq!(hits.len(), 3, "round {round}");
        assert!(store.get("t", seeded[0].id).await.expect("get").is_some(), "round {round}");
    }
}

/// The pool's return check keeps healthy connections: sequential operations of every kind run on
/// one Postgres backend rather than a new connection each (the check itself must not mistake an
/// ordinary session for one inside a transaction).
#[tokio::test]
async fn pgvector_healthy_connections_are_reused() {
    let database = PgDatabase::create().await;
    let config = mem0_core::store::PgVectorConfig { max_connections: 1, ..Default::default() };
    let store = mem0_core::store::PgVectorStore::connect(&database.url(), &config).await.expect("connect");
    store.ensure_dimension(DIM, "test").await.expect("dimension");
    let admin = sqlx::PgPool::connect(&database.admin_url).await.expect("admin");
    let backends = || async {
        sqlx::query_scalar::<_, i32>(
            "select pid from pg_stat_activity where datname = $1 and backend_type = 'client backend' order by pid",
        )
        .bind(&database.name)
        .fetch_all(&admin)
        .await
        .expect("activity")
    };
    let seeded = record("t", "u", "the first memory", unit([1.0, 0.0, 0.0, 0.0]), json!({}), 0);
    insert(&store, std::slice::from_ref(&seeded)).await.expect("insert");
    let first = backends().await;
    assert_eq!(first.len(), 1, "one pooled connection: {first:?}");
    for round in 0..20 {
        let extra = record("t", "u", &format!("memory {round}"), unit([0.0, 1.0, 0.0, 0.0]), json!({}), round + 1);
        insert(&store, &[extra]).await.expect("insert");
        store.search(&query("t", "u", None), &unit([1.0, 0.0, 0.0, 0.0]), 3, 0.0).await.expect("search");
        store.keyword_candidates(&query("t", "u", None), &["memory".to_owned()], 10).await.expect("keyword");
        assert!(store.get("t", seeded.id).await.expect("get").is_some());
    }
    assert_eq!(backends().await, first, "the same backend served every operation");
}
