//! Storage of memories: the store traits by capability ([`MemoryRows`], [`Journal`],
//! [`VectorIndex`], [`KeywordIndex`], [`EntityIndex`]; [`VectorStore`] is all of them), the types
//! they exchange, one SQL filter compiler (`sql.rs`) and the two implementations: the embedded
//! SQLite store (`sqlite/`) and Postgres + pgvector (`pgvector/`).

mod cache;
mod index;
mod pgvector;
mod sql;
mod sqlite;

use std::collections::HashMap;
use std::fmt::Debug;

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use self::pgvector::{ImportReport, PgVectorConfig, PgVectorStore, MIGRATOR};
pub(crate) use sqlite::{open_sqlite, WriteTurns};
pub use sqlite::{SqliteStore, DEFAULT_RECORD_CACHE_ENTRIES, DEFAULT_VECTOR_CACHE_ENTRIES};

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::history::BufferedMessages;
use crate::scope::Scope;
use crate::types::{HistoryRecord, MemoryRecord};

/// Which rows a read may see: always one tenant and one scope, optionally narrowed by a filter.
#[derive(Debug, Clone)]
pub struct ScopedQuery {
    /// Tenant of the caller.
    pub tenant: String,
    /// Every id set here must match the row's (an empty scope is only built for admin-wide listing).
    pub scope: Scope,
    /// Further conditions; ANDed with tenant and scope, so it can only narrow.
    pub filter: Option<Filter>,
    /// Include memories whose expiration date has passed.
    pub show_expired: bool,
    /// The day expiration is judged against (UTC).
    pub today: NaiveDate,
    /// Include memories that are `superseded` or `retired` (see [`crate::state`]).
    pub include_superseded: bool,
    /// Every write committed before this instant must be seen, and a store may answer from what
    /// it learned at any moment since: the calls of one search pass its start, so they share one
    /// look at a change feed. `None`: every write committed before each call.
    pub fresh_since: Option<std::time::Instant>,
}

impl ScopedQuery {
    /// The query's scope alone (tenant and scope ids; every expiration, no filter): what the
    /// keyword statistics and entity weights are counted over.
    pub(crate) fn scope_only(&self) -> Self {
        Self { filter: None, show_expired: true, include_superseded: true, ..self.clone() }
    }

    /// The query without its metadata filter (scope and expiration).
    pub(crate) fn without_filter(&self) -> Self {
        Self { filter: None, ..self.clone() }
    }
}

/// Position after the last row of a page, in the list order (newest first, then id descending).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// `created_at` of the last row returned.
    pub created_at: DateTime<Utc>,
    /// id of the last row returned.
    pub id: Uuid,
}

impl Cursor {
    /// Returns the opaque token given to callers.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.created_at.timestamp_micros(), self.id))
    }

    /// Parses a token produced by [`Cursor::encode`].
    ///
    /// # Errors
    /// [`Error::Validation`] on field `cursor` for anything else.
    pub fn decode(token: &str) -> Result<Self> {
        let invalid = || Error::validation("cursor", "not a cursor returned by this server");
        let bytes = URL_SAFE_NO_PAD.decode(token.trim()).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (micros, id) = text.split_once(':').ok_or_else(invalid)?;
        let created_at = micros.parse::<i64>().ok().and_then(DateTime::from_timestamp_micros).ok_or_else(invalid)?;
        let id = Uuid::parse_str(id).map_err(|_| invalid())?;
        Ok(Self { created_at, id })
    }
}

/// The three kinds of scope id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    /// `agent_id`.
    Agent,
    /// `run_id`.
    Run,
    /// `user_id`.
    User,
}

impl ScopeKind {
    /// Every kind, in listing order.
    pub const ALL: [ScopeKind; 3] = [ScopeKind::Agent, ScopeKind::Run, ScopeKind::User];

    /// Returns the column holding ids of this kind.
    pub fn column(self) -> &'static str {
        match self {
            Self::Agent => "agent_id",
            Self::Run => "run_id",
            Self::User => "user_id",
        }
    }

    /// Parses `user`, `agent` or `run`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "agent" => Some(Self::Agent),
            "run" => Some(Self::Run),
            "user" => Some(Self::User),
            _ => None,
        }
    }

    /// Returns `user`, `agent` or `run`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Run => "run",
            Self::User => "user",
        }
    }
}

/// A scope id that owns memories, with how many and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScopeSummary {
    /// Which kind of id.
    #[serde(rename = "type")]
    pub kind: ScopeKind,
    /// The id.
    pub id: String,
    /// Memories carrying it (expired included).
    pub total_memories: u64,
    /// Oldest memory's creation.
    pub created_at: DateTime<Utc>,
    /// Newest change.
    pub updated_at: DateTime<Utc>,
}

impl ScopeSummary {
    /// Returns the one-id scope this summary describes.
    pub fn as_scope(&self) -> Scope {
        let id = Some(self.id.clone());
        match self.kind {
            ScopeKind::Agent => Scope { agent_id: id, ..Scope::default() },
            ScopeKind::Run => Scope { run_id: id, ..Scope::default() },
            ScopeKind::User => Scope { user_id: id, ..Scope::default() },
        }
    }
}

/// Position after the last scope returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeCursor {
    /// Kind of the last id.
    pub kind: ScopeKind,
    /// The last id.
    pub id: String,
}

impl ScopeCursor {
    /// Returns the opaque token.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.kind.as_str(), self.id))
    }

    /// Parses a token produced by [`ScopeCursor::encode`].
    ///
    /// # Errors
    /// [`Error::Validation`] on field `cursor`.
    pub fn decode(token: &str) -> Result<Self> {
        let invalid = || Error::validation("cursor", "not a cursor returned by this server");
        let bytes = URL_SAFE_NO_PAD.decode(token.trim()).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (kind, id) = text.split_once(':').ok_or_else(invalid)?;
        // The id goes into a query: only what a scope id may be (no NUL, no control characters).
        let id = crate::scope::validate_scope_id("cursor", id).map_err(|_| invalid())?;
        Ok(Self { kind: ScopeKind::parse(kind).ok_or_else(invalid)?, id })
    }
}

/// One page of scope ids.
#[derive(Debug, Clone)]
pub struct ScopePage {
    /// Scope ids, by type then id.
    pub items: Vec<ScopeSummary>,
    /// Token for the next page.
    pub next: Option<String>,
}

/// One page of a listing.
#[derive(Debug, Clone)]
pub struct Page {
    /// The rows, newest first.
    pub records: Vec<MemoryRecord>,
    /// Where the next page starts, when there is one.
    pub next: Option<Cursor>,
}

impl Page {
    /// A page from up to `page_size + 1` rows read newest first: the extra row only says that
    /// another page exists.
    pub(crate) fn from_fetched(mut records: Vec<MemoryRecord>, page_size: usize) -> Self {
        let next = if records.len() > page_size {
            records.truncate(page_size);
            records.last().map(|last| Cursor { created_at: last.created_at, id: last.id })
        } else {
            None
        };
        Self { records, next }
    }
}

/// A memory with its similarity to the query.
#[derive(Debug, Clone)]
pub struct ScoredRecord {
    /// The memory (shared with the store's row cache: copy out only what is returned).
    pub record: std::sync::Arc<MemoryRecord>,
    /// Cosine similarity clipped to [0, 1].
    pub score: f32,
}

/// The keyword statistics of a scope (tenant and scope ids; expiration and metadata filters do
/// not change them, see [`crate::retrieval::Bm25`]) for some terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeywordStats {
    /// Memories in the scope.
    pub doc_count: u64,
    /// Their mean number of analysed terms.
    pub avg_doc_len: f64,
    /// Memories of the scope containing each asked term (absent: none).
    pub document_frequency: HashMap<String, u64>,
}

/// What BM25 retrieval needs from a store for one query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeywordCandidates {
    /// The scope's statistics for the query terms.
    pub stats: KeywordStats,
    /// The memories matching the query (scope, expiration, filter) with the highest BM25, best
    /// first (ties by id), at most the asked number, with their BM25.
    pub top: Vec<(Uuid, f64)>,
}

/// One entity a memory mentions, to be linked: the store finds the scope's entity row with the
/// same normalised name (or, failing that, the most similar embedding at or above the merge
/// threshold) or creates one, and links the memory to it.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityLink {
    /// The memory that mentions the entity.
    pub memory_id: Uuid,
    /// Its tenant.
    pub tenant: String,
    /// Its scope (entity rows are per scope).
    pub scope: Scope,
    /// The entity as written.
    pub name: String,
    /// Its matching form ([`crate::entities::normalize`]).
    pub normalized: String,
    /// Its kind (`proper`, `person`, `llm`, …).
    pub kind: String,
    /// Unit-length embedding of the name.
    pub embedding: Vec<f32>,
}

/// An entity named in a search query.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityProbe {
    /// Matching form of the name.
    pub normalized: String,
    /// Unit-length embedding of the name.
    pub embedding: Vec<f32>,
}

/// A memory linked to a query entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityHit {
    /// The memory.
    pub memory_id: Uuid,
    /// Index of the query entity it is linked to.
    pub probe: usize,
}

/// Most (entity row, probe) pairs a search follows: bounds the statements built from them.
pub const MAX_MATCHED_ENTITIES: usize = 1_000;

/// The entity rows of a scope that match the query's entities, and the memories best linked to
/// them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EntityCandidates {
    /// Matching entity rows (store ids) and the probes each matches; at most
    /// [`MAX_MATCHED_ENTITIES`] (entity, probe) pairs.
    pub matched: Vec<(String, Vec<usize>)>,
    /// For each probe, the memories of the scope linked to an entity it matches (expiration and
    /// filters not applied, like the keyword statistics).
    pub linked: Vec<u64>,
    /// The memories matching the query that are linked to the most (IDF-weighted) query
    /// entities, best first, at most the asked number, with the probes each is linked to.
    pub hits: Vec<EntityHit>,
}

/// A change the history volume has not received yet, kept in the store's journal: it is
/// written in the same transaction as the change it describes, delivered to the history volume
/// right after, and removed once delivered. A crash in between leaves it in the journal, and
/// [`crate::Memory`] delivers it at the next start. The store does not read the payload.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    /// Entry id (also the id the delivered history row or message batch gets).
    pub id: Uuid,
    /// Tenant of the change.
    pub tenant: String,
    /// The memory a history entry is about (`None` for buffered messages).
    pub memory_id: Option<Uuid>,
    /// When it was written.
    pub created_at: DateTime<Utc>,
    /// What to deliver (JSON).
    pub payload: serde_json::Value,
}

/// One all-or-nothing write: memory rows, their keyword index, their entity links and the
/// journal entries (or, history on Postgres, the history itself) describing the change commit in
/// one store transaction, or nothing does. Applied in this order: deletes, updates, inserts,
/// link removal (`relink`), new links, journal entries, settled entries, history.
#[derive(Debug, Clone, Default)]
pub struct WriteSet {
    /// Tenant of the deleted rows (updated and inserted rows carry their own).
    pub tenant: String,
    /// New rows.
    pub insert: Vec<MemoryRecord>,
    /// Rows replaced by id (text, hash, metadata, timestamps, expiration, entities, embedding).
    pub update: Vec<MemoryRecord>,
    /// Rows removed by id (their links and index entries go with them).
    pub delete: Vec<Uuid>,
    /// Without it a missing update or delete target fails the write with
    /// [`Error::MemoryNotFound`]; with it missing delete targets are skipped (and their journal
    /// entries not written).
    pub skip_missing: bool,
    /// Memories whose entity links are removed before `links` are added.
    pub relink: Vec<Uuid>,
    /// Entity links to add (entities found or created per scope).
    pub links: Vec<EntityLink>,
    /// A new entity merges into an existing one of its scope at least this similar.
    pub merge_threshold: f32,
    /// Journal entries to record with the change.
    pub journal: Vec<JournalEntry>,
    /// Journal entries to remove (delivered, or their change undone).
    pub settle: Vec<Uuid>,
    /// History entries committed with the change (entries of skipped delete targets are not),
    /// by a store that keeps the history in its own database (Postgres with
    /// `memory.history.provider = "postgres"`); other stores refuse a write that carries them.
    pub history: Vec<HistoryRecord>,
    /// Buffered conversation messages committed with the change, like `history`.
    pub messages: Vec<BufferedMessages>,
    /// When set, inserts whose hash a memory matching this query already has are skipped
    /// (reported in [`Applied::skipped`], with their links, history and journal entries). The
    /// check runs inside the transaction under a lock per tenant and scope, so concurrent writers
    /// (replicas too) cannot both store the same fact.
    pub unique_in: Option<ScopedQuery>,
    /// When set, inserts whose id a stored memory (of any tenant) already has are skipped
    /// (reported in [`Applied::skipped`], like `unique_in`): imports are idempotent by id.
    pub skip_existing_ids: bool,
    /// Rows that must still carry these `updated_at` values (checked first); otherwise the write
    /// fails with [`Error::Conflict`] and changes nothing. Guards undo and re-analysis against
    /// overwriting a change made meanwhile.
    pub expect: Vec<(Uuid, DateTime<Utc>)>,
    /// State keys whose chains are resolved again after the change, in its transaction (under a
    /// lock per key on Postgres): see [`crate::state`].
    pub resolve: Vec<crate::state::StateKey>,
}

/// What a [`WriteSet`] replaced, as it was before: enough to write the inverse change.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// Deleted rows.
    pub deleted: Vec<MemoryRecord>,
    /// Updated rows, before the update.
    pub replaced: Vec<MemoryRecord>,
    /// The entity links of the relinked and deleted memories, before the write.
    pub previous_links: Vec<EntityLink>,
    /// Delete targets that did not exist (with `skip_missing`).
    pub missing: Vec<Uuid>,
    /// Inserts skipped because their hash (with `unique_in`) or their id (with
    /// `skip_existing_ids`) was already there.
    pub skipped: Vec<Uuid>,
}

impl Applied {
    /// True when the journal entry or history entry about `memory_id` goes with the write: its
    /// memory was not a missing delete target nor a skipped insert.
    pub fn describes(&self, memory_id: Option<Uuid>) -> bool {
        memory_id.is_none_or(|id| !self.missing.contains(&id) && !self.skipped.contains(&id))
    }
}

/// The inserts of `write` without those whose hash is in `known`, and the ids left out.
pub(crate) fn without_known(
    write: &WriteSet,
    known: &std::collections::HashSet<String>,
) -> (Vec<MemoryRecord>, Vec<Uuid>) {
    let (skipped, kept): (Vec<&MemoryRecord>, Vec<&MemoryRecord>) =
        write.insert.iter().partition(|record| known.contains(&record.hash));
    (kept.into_iter().cloned().collect(), skipped.into_iter().map(|record| record.id).collect())
}

/// `inserts` without those whose id is in `existing`, and the ids left out.
pub(crate) fn without_ids(
    inserts: Vec<MemoryRecord>,
    existing: &std::collections::HashSet<Uuid>,
) -> (Vec<MemoryRecord>, Vec<Uuid>) {
    let (skipped, kept): (Vec<MemoryRecord>, Vec<MemoryRecord>) =
        inserts.into_iter().partition(|record| existing.contains(&record.id));
    (kept, skipped.into_iter().map(|record| record.id).collect())
}

/// The links of `write` without those of skipped inserts.
pub(crate) fn links_to_write<'a>(write: &'a WriteSet, skipped: &[Uuid]) -> std::borrow::Cow<'a, [EntityLink]> {
    if skipped.is_empty() {
        std::borrow::Cow::Borrowed(&write.links)
    } else {
        write.links.iter().filter(|link| !skipped.contains(&link.memory_id)).cloned().collect()
    }
}

/// The key of the lock a write with [`WriteSet::unique_in`] takes for its tenant and scope.
pub(crate) fn dedup_lock_key(query: &ScopedQuery) -> String {
    let id = |value: &Option<String>| value.clone().unwrap_or_default();
    format!(
        "dedup\n{}\n{}\n{}\n{}",
        query.tenant,
        id(&query.scope.user_id),
        id(&query.scope.agent_id),
        id(&query.scope.run_id)
    )
}

impl WriteSet {
    /// Inserts `records`.
    pub fn insert(records: &[MemoryRecord]) -> Self {
        Self { insert: records.to_vec(), ..Self::default() }
    }

    /// Replaces `record` (fails with [`Error::MemoryNotFound`] when it does not exist).
    pub fn update(record: &MemoryRecord) -> Self {
        Self { update: vec![record.clone()], ..Self::default() }
    }

    /// Deletes `ids` of `tenant`, skipping those that do not exist.
    pub fn delete(tenant: &str, ids: &[Uuid]) -> Self {
        Self { tenant: tenant.to_owned(), delete: ids.to_vec(), skip_missing: true, ..Self::default() }
    }

    /// Replaces the entity links of `replace` by `links` (entities left without links go).
    pub fn relink(links: &[EntityLink], replace: &[Uuid], merge_threshold: f32) -> Self {
        Self { relink: replace.to_vec(), links: links.to_vec(), merge_threshold, ..Self::default() }
    }

    /// The change that undoes this one once it was applied with `applied`, settling `journal`.
    pub fn inverse(&self, applied: &Applied, journal: Vec<Uuid>) -> WriteSet {
        WriteSet {
            tenant: self.tenant.clone(),
            insert: applied.deleted.clone(),
            update: applied.replaced.clone(),
            // Skipped inserts were somebody else's rows: never undone.
            delete: self.insert.iter().map(|record| record.id).filter(|id| !applied.skipped.contains(id)).collect(),
            skip_missing: true,
            relink: self.relink.clone(),
            links: applied.previous_links.clone(),
            merge_threshold: self.merge_threshold,
            journal: Vec::new(),
            settle: journal,
            // Only if nobody changed the rows since: never overwrite a later change.
            expect: self
                .insert
                .iter()
                .filter(|record| !applied.skipped.contains(&record.id))
                .chain(&self.update)
                .map(|record| (record.id, record.updated_at))
                .collect(),
            history: Vec::new(),
            messages: Vec::new(),
            unique_in: None,
            skip_existing_ids: false,
            // The chains are a function of their rows: resolved again without this change's rows,
            // they are what they were before it.
            resolve: self.resolve.clone(),
        }
    }
}

/// The state keys of `write`, sorted and without repeats (locks are taken in this order).
pub(crate) fn keys_to_resolve(write: &WriteSet) -> Vec<&crate::state::StateKey> {
    let mut keys: Vec<&crate::state::StateKey> = write.resolve.iter().collect();
    keys.sort_by(|a, b| {
        (&a.tenant, &a.key, &a.scope.user_id, &a.scope.agent_id, &a.scope.run_id).cmp(&(
            &b.tenant,
            &b.key,
            &b.scope.user_id,
            &b.scope.agent_id,
            &b.scope.run_id,
        ))
    });
    keys.dedup();
    keys
}

/// Keeps the first [`MAX_MATCHED_ENTITIES`] (entity, probe) pairs of `matched`.
pub(crate) fn cap_matched(matched: &mut Vec<(String, Vec<usize>)>) {
    let mut room = MAX_MATCHED_ENTITIES;
    matched.retain_mut(|(_, probes)| {
        probes.truncate(room);
        room -= probes.len();
        !probes.is_empty()
    });
}

/// The probes an entity row matches: the same normalised name, or an embedding at least
/// `threshold` similar.
pub(crate) fn matching_probes(
    probes: &[EntityProbe],
    normalized: &str,
    embedding: &[f32],
    threshold: f32,
) -> Vec<usize> {
    probes
        .iter()
        .enumerate()
        .filter(|(_, probe)| normalized == probe.normalized || cosine(embedding, &probe.embedding) >= threshold)
        .map(|(index, _)| index)
        .collect()
}

/// Cosine similarity of unit vectors (0 when the dimensions differ).
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    dot(a, b)
}

/// A map hashed with a fast, per-process seeded hasher (foldhash, hashbrown's default): the maps
/// a search reads many times, keyed by memory id or analysed term (SipHash, std's default, was a
/// few percent of a hybrid search).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A set hashed as [`FastMap`].
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Dot product of two vectors of equal length, in eight independent lanes: a single running sum
/// is one long chain of dependent additions the compiler may not reorder (floating point), so it
/// runs at one addition per add latency; eight lanes vectorise. Exact search over 10,000
/// 384-dimensional embeddings: about 4 ms with one sum, 0.5 ms with lanes.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut lanes = [0.0_f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// A stored status (`active`, …).
fn stored_status(status: &str) -> crate::error::Result<crate::types::MemoryStatus> {
    crate::types::MemoryStatus::parse(status)
        .ok_or_else(|| crate::error::Error::Internal(format!("stored status {status:?} is unknown")))
}

/// A stored source type (`user_stated`, …).
fn stored_source(source_type: &str) -> crate::error::Result<crate::types::SourceType> {
    crate::types::SourceType::parse(source_type)
        .ok_or_else(|| crate::error::Error::Internal(format!("stored source_type {source_type:?} is unknown")))
}

/// The provenance of a stored row, from its columns (both stores store the same values).
pub(crate) fn provenance(
    source_type: String,
    source_actor: Option<String>,
    source_app: Option<String>,
    evidence_ref: Option<String>,
    confidence: f64,
) -> crate::error::Result<crate::types::Provenance> {
    let source_type = stored_source(&source_type)?;
    Ok(crate::types::Provenance { source_type, source_actor, source_app, evidence_ref, confidence: confidence as f32 })
}

/// The state of a stored row, from its columns.
pub(crate) fn state(
    state_key: Option<String>,
    status: &str,
    superseded_by: Option<Uuid>,
    valid_to: Option<DateTime<Utc>>,
    event_time: Option<DateTime<Utc>>,
) -> crate::error::Result<crate::types::StateInfo> {
    Ok(crate::types::StateInfo { state_key, status: stored_status(status)?, superseded_by, valid_to, event_time })
}

/// One memory of a state-key chain as the resolver needs it, from the columns both stores select
/// (`id, status, coalesce(event_time, created_at), confidence, source_type, superseded_by,
/// valid_to`).
pub(crate) fn state_row(
    id: Uuid,
    status: &str,
    time: DateTime<Utc>,
    confidence: f64,
    source_type: &str,
    superseded_by: Option<Uuid>,
    valid_to: Option<DateTime<Utc>>,
) -> crate::error::Result<crate::state::StateRow> {
    Ok(crate::state::StateRow {
        id,
        status: stored_status(status)?,
        time,
        confidence: confidence as f32,
        source_type: stored_source(source_type)?,
        superseded_by,
        valid_to,
    })
}

/// Number of whitespace-separated terms of an analysed text.
pub fn doc_len(text_lemmatized: &str) -> u32 {
    u32::try_from(text_lemmatized.split_whitespace().count()).unwrap_or(u32::MAX)
}

/// Term frequencies of an analysed text, sorted by term.
pub fn term_frequencies(text_lemmatized: &str) -> Vec<(String, u32)> {
    let mut counts: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
    for term in text_lemmatized.split_whitespace() {
        *counts.entry(term).or_default() += 1;
    }
    counts.into_iter().map(|(term, count)| (term.to_owned(), count)).collect()
}

/// Memory rows: their writes (each [`WriteSet`] commits rows, keyword index, entity links and
/// journal entries in one transaction), reads by id, listing, scope aggregation. Every read and
/// write is confined to one tenant; scoped reads to one scope.
#[async_trait]
pub trait MemoryRows: Debug + Send + Sync + 'static {
    /// Applies a write in one transaction: all of it, or (on any error) none of it.
    async fn apply(&self, write: &WriteSet) -> Result<Applied>;

    /// Returns the memory with `id` in `tenant`, if any.
    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<MemoryRecord>>;

    /// Returns the memories of `tenant` with the given ids (those that exist), in no given order.
    async fn get_many(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<MemoryRecord>>;

    /// [`MemoryRows::get_many`] in the query's tenant, for `ids` a search of `query` found: as
    /// fresh as `query.fresh_since` asks, so a store may answer from what that search's other
    /// calls learned.
    /// The rows are shared with the store's row cache.
    async fn get_candidates(&self, query: &ScopedQuery, ids: &[Uuid]) -> Result<Vec<std::sync::Arc<MemoryRecord>>>;

    /// Returns one page of memories matching `query`, newest first (ties by id, descending).
    async fn list(&self, query: &ScopedQuery, after: Option<Cursor>, page_size: usize) -> Result<Page>;

    /// Returns up to `limit` memories matching `query` in [`MemoryRows::list`]'s order, after
    /// skipping the first `offset` (numbered pages, as Mem0's API pages; cursors are cheaper).
    async fn list_at(&self, query: &ScopedQuery, offset: usize, limit: usize) -> Result<Vec<MemoryRecord>>;

    /// How many memories match `query`.
    async fn count(&self, query: &ScopedQuery) -> Result<u64>;

    /// Returns up to `limit` ids of `kind` owning memories in `tenant`, ordered by id, after `after`.
    async fn scopes(
        &self,
        tenant: &str,
        kind: ScopeKind,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ScopeSummary>>;

    /// Deletes every memory (and journal entry) of `tenant`, or of every tenant when `None`.
    async fn reset(&self, tenant: Option<&str>) -> Result<()>;

    /// Memories of every tenant without analysed text (written before the keyword index existed,
    /// or analysing to no terms), by id after `after`, at most `limit`.
    async fn unanalysed(&self, after: Option<Uuid>, limit: usize) -> Result<Vec<MemoryRecord>>;

    /// Checks the store answers.
    async fn ping(&self) -> Result<()>;

    /// The kind of store, for metrics and logs (`sqlite`, `pgvector`).
    fn backend(&self) -> &'static str;

    /// Its connection pool now.
    fn pool_status(&self) -> crate::metrics::PoolStatus;
}

/// The history journal: entries written by [`MemoryRows::apply`] with the change they describe,
/// read back until the history volume has them.
#[async_trait]
pub trait Journal: Send + Sync {
    /// Journal entries written before `before`, oldest first, at most `limit`.
    async fn journal(&self, before: DateTime<Utc>, limit: usize) -> Result<Vec<JournalEntry>>;

    /// Removes journal entries (delivered ones).
    async fn settle(&self, ids: &[Uuid]) -> Result<()>;
}

/// Nearest-neighbour search over the memories' embeddings.
#[async_trait]
pub trait VectorIndex: Send + Sync {
    /// Checks that stored embeddings have `dimension` dimensions and records it for an empty store.
    ///
    /// # Errors
    /// [`Error::Config`] naming both numbers on a mismatch.
    async fn ensure_dimension(&self, dimension: usize, model_id: &str) -> Result<()>;

    /// Returns the `limit` memories most similar to `vector` among those matching `query`,
    /// best first, with similarity at least `threshold`.
    async fn search(
        &self,
        query: &ScopedQuery,
        vector: &[f32],
        limit: usize,
        threshold: f32,
    ) -> Result<Vec<ScoredRecord>>;
}

/// The keyword index BM25 is computed from.
#[async_trait]
pub trait KeywordIndex: Send + Sync {
    /// Returns the scope's statistics for `terms` (distinct) and the `limit` memories matching
    /// `query` with the highest BM25 ([`crate::retrieval::Bm25`]), computed in the store.
    async fn keyword_candidates(
        &self,
        query: &ScopedQuery,
        terms: &[String],
        limit: usize,
    ) -> Result<KeywordCandidates>;
}

/// Entity rows per scope and the memories linked to them (links are written by
/// [`MemoryRows::apply`]).
#[async_trait]
pub trait EntityIndex: Send + Sync {
    /// Finds the entity rows of the query's scope whose normalised name equals a probe's or
    /// whose embedding is at least `threshold` similar to it, counts the memories linked to each
    /// probe's rows, and returns the `limit` memories matching `query` linked to the greatest
    /// IDF-weighted share of the probes ([`crate::retrieval::EntityScores`]).
    async fn entity_candidates(
        &self,
        query: &ScopedQuery,
        probes: &[EntityProbe],
        threshold: f32,
        limit: usize,
    ) -> Result<EntityCandidates>;

    /// The links of `memory_ids` to the `matched` entity rows (found by
    /// [`EntityIndex::entity_candidates`] for `query`, whose scope they are of), as hits.
    async fn entity_links(
        &self,
        query: &ScopedQuery,
        matched: &[(String, Vec<usize>)],
        memory_ids: &[Uuid],
    ) -> Result<Vec<EntityHit>>;
}

/// When memories were last read (see [`crate::decay`]).
#[async_trait]
pub trait AccessLog: Send + Sync {
    /// Records reads: per memory the latest read time and the number of reads. Reads of memories
    /// that no longer exist are ignored.
    async fn record_reads(&self, reads: &[crate::decay::MemoryRead]) -> Result<()>;

    /// The last read of each of `ids` (of `tenant`) that was ever read.
    async fn last_reads(&self, tenant: &str, ids: &[Uuid]) -> Result<std::collections::HashMap<Uuid, DateTime<Utc>>>;
}

/// Reads grouped per memory: (tenant, memory, latest time, count), in memory order.
pub(crate) fn grouped_reads(reads: &[crate::decay::MemoryRead]) -> Vec<(String, Uuid, DateTime<Utc>, i64)> {
    let mut grouped: std::collections::BTreeMap<Uuid, (String, DateTime<Utc>, i64)> = std::collections::BTreeMap::new();
    for read in reads {
        let entry = grouped.entry(read.memory_id).or_insert_with(|| (read.tenant.clone(), read.at, 0));
        entry.1 = entry.1.max(read.at);
        entry.2 += 1;
    }
    grouped.into_iter().map(|(id, (tenant, at, count))| (tenant, id, at, count)).collect()
}

/// Everything the memory service needs from a store. One SQL type implements all of the parts;
/// another backend could combine different ones.
pub trait VectorStore: MemoryRows + Journal + VectorIndex + KeywordIndex + EntityIndex + AccessLog {}

impl<T: MemoryRows + Journal + VectorIndex + KeywordIndex + EntityIndex + AccessLog> VectorStore for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_products_in_lanes_match_the_plain_sum() {
        for length in [0, 1, 7, 8, 9, 384, 385] {
            let a: Vec<f32> = (0..length).map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0).collect();
            let b: Vec<f32> = (0..length).map(|i| ((i * 5 % 11) as f32 - 5.0) / 10.0).collect();
            let plain: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            assert!((f64::from(dot(&a, &b)) - plain).abs() < 1e-4, "length {length}");
        }
    }

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let cursor = Cursor {
            created_at: DateTime::from_timestamp_micros(1_700_000_000_123_456).expect("time"),
            id: Uuid::now_v7(),
        };
        assert_eq!(Cursor::decode(&cursor.encode()).expect("decode"), cursor);
        for bad in ["", "abc", "!!!", &URL_SAFE_NO_PAD.encode("12:not-a-uuid")] {
            assert!(Cursor::decode(bad).is_err(), "{bad}");
        }
    }
}
