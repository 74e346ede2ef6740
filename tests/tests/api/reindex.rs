//! `reindex`: memories written before the keyword index and entity links existed (here: rows
//! written straight into the store without analysis) become findable by BM25 and entities.

use std::sync::Arc;

use chrono::Utc;
use mem0_core::history::HistoryStore;
use mem0_core::memory::SearchMode;
use mem0_core::scope::Scope;
use mem0_core::store::{MemoryRows as _, SqliteStore, WriteSet};
use mem0_core::types::{memory_hash, MemoryRecord, Metadata, Provenance, StateInfo};
use mem0_core::{Caller, Memory, SearchRequest};
use mem0_http_tests::local_embedder;
use uuid::Uuid;

#[tokio::test]
async fn old_rows_get_keyword_postings_and_entity_links() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(SqliteStore::open(&dir.path().join("memories.db")).await.expect("store"));
    let history = HistoryStore::open(&dir.path().join("history.db")).await.expect("history");
    let embedder = local_embedder().await;
    let memory = Memory::new(store.clone(), history, embedder.clone()).await.expect("memory");
    let caller = Caller::local_admin("t");
    let scope = Scope::new(Some("u"), None, None).expect("scope");
    let texts = ["Caroline adopted a greyhound named Zephyr", "And the.", "The user likes tea"];
    let vectors = embedder.embed_batch(&texts.map(str::to_owned)).await.expect("embed");
    let now = Utc::now();
    let old: Vec<MemoryRecord> = texts
        .iter()
        .zip(vectors)
        .map(|(text, embedding)| MemoryRecord {
            id: Uuid::now_v7(),
            tenant: "t".into(),
            scope: scope.clone(),
            memory: (*text).to_owned(),
            hash: memory_hash(text),
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
            embedding: embedding.into(),
            provenance: Provenance::default(),
            state: StateInfo::default(),
        })
        .collect();
    store.apply(&WriteSet::insert(&old)).await.expect("insert old rows");
    let keyword = |query: &str| SearchRequest {
        scope: scope.clone(),
        filter: None,
        query: query.to_owned(),
        top_k: 5,
        threshold: 0.0,
        show_expired: false,
        include_superseded: false,
        temporal: false,
        reference_time: None,
        decay: None,
        mode: SearchMode::Keyword,
        explain: true,
        rerank: false,
    };
    assert!(memory.search(&caller, keyword("Zephyr greyhound")).await.expect("search").results.is_empty());

    assert_eq!(memory.reindex(2).await.expect("reindex"), 3, "every old row, in batches of 2");
    let found = memory.search(&caller, keyword("Zephyr greyhound")).await.expect("search").results;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].entities, vec!["Caroline", "Zephyr"]);
    let hybrid = SearchRequest { mode: SearchMode::Hybrid, query: "Caroline".into(), ..keyword("") };
    let top = memory.search(&caller, hybrid).await.expect("search").results;
    assert!(top[0].explain.as_ref().is_some_and(|explain| explain.entity > 0.9), "{top:?}");
    // "And the." analyses to no terms: it stays unanalysed and is the only row a second run sees.
    assert_eq!(memory.reindex(10).await.expect("reindex"), 1);
}
