//! An in-process search index per scope for the embedded store: the scope's embeddings in one
//! contiguous block, its keyword postings and its entity links, so that a search reads no rows
//! from SQLite to find its candidates (the rows it returns still come through the row cache).
//!
//! The database stays the only source of truth. Every committed write appends the ids it changed
//! to a change log (with their scope when the write knows it); before a search uses a scope's
//! index it reloads, from the database, the rows of the changes logged since it last did. A write
//! logs its changes before `apply` returns, so a caller always finds its own writes. An index that
//! fell too far behind (the log overflowed, or more changed than is worth patching) is rebuilt.
//!
//! Bounded: the indexes together hold at most `capacity` memories (the least recently searched
//! scopes make room); a scope larger than that is searched through SQL as before.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use chrono::NaiveDate;
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::codec::decode_embedding;
use super::write::{scope_entities, ScopeEntities};
use super::{bind_all, parse_id, Candidate, FETCH_CHUNK};
use crate::error::{Error, Result};
use crate::retrieval::{Bm25, EntityScores};
use crate::scope::Scope;
use crate::store::sql::{where_clause, Sqlite};
use crate::store::{
    cap_matched, dot, matching_probes, term_frequencies, EntityCandidates, EntityHit, EntityProbe, KeywordCandidates,
    KeywordStats, ScopedQuery,
};

/// Changes kept for indexes to catch up with; an index further behind is rebuilt.
const LOG_CAPACITY: usize = 16_384;
/// Changed memories worth patching into an index in one go (else it is rebuilt), at least.
const PATCH_MIN: usize = 256;
/// Entries from which a search of an index tells the runtime it blocks (`block_in_place`): a few
/// milliseconds of CPU without an await would hold up the other tasks of its worker. A writer next
/// to a stream of searches over 10,000 memories managed 2 adds/s without; 196 with.
const BLOCKING_MIN: usize = 2_000;
/// Removed entries an index keeps as tombstones before it is compacted.
const TOMBSTONES_MIN: usize = 1024;

/// One memory a committed write changed (inserted, updated, deleted, relinked or restated).
#[derive(Debug, Clone)]
pub(super) struct Change {
    /// The memory's tenant, when the write knows it.
    pub(super) tenant: Option<String>,
    pub(super) id: Uuid,
    /// The memory's scope, when the write knows it (inserts, updates, deletes).
    pub(super) scope: Option<Scope>,
}

#[derive(Debug, Default)]
struct ChangeLog {
    /// Sequence number the next change gets.
    next: u64,
    entries: VecDeque<(u64, Change)>,
}

/// The indexes of the scopes searched lately, and the log they catch up from.
#[derive(Debug)]
pub(super) struct ScopeIndexes {
    /// Most memories held by all indexes together.
    capacity: usize,
    log: Mutex<ChangeLog>,
    slots: Mutex<HashMap<(String, Scope), Arc<Slot>>>,
    /// Ticks for "least recently searched".
    clock: AtomicU64,
}

/// One scope's index, built on first use.
#[derive(Debug, Default)]
pub(super) struct Slot {
    /// Held while the index is built or brought up to date (one loader per scope).
    loading: tokio::sync::Mutex<()>,
    index: RwLock<Option<ScopeIndex>>,
    used: AtomicU64,
}

impl Slot {
    fn read(&self) -> RwLockReadGuard<'_, Option<ScopeIndex>> {
        self.index.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `work` on the index (as blocking work when the index is large and the runtime has
    /// other workers to take over); `None` when there is no index (dropped meanwhile).
    pub(super) async fn run<T: Send + 'static>(
        self: Arc<Self>,
        work: impl FnOnce(&ScopeIndex) -> T + Send + 'static,
    ) -> Result<Option<T>> {
        let large = self.read().as_ref().is_some_and(|index| index.ids.len() >= BLOCKING_MIN);
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if large && multi_thread {
            // The worker hands its other tasks to another thread while this runs.
            return Ok(tokio::task::block_in_place(|| self.read().as_ref().map(work)));
        }
        Ok(self.read().as_ref().map(work))
    }
}

impl ScopeIndexes {
    /// Indexes holding at most `capacity` memories together (0: none, every search uses SQL).
    pub(super) fn new(capacity: usize) -> Self {
        Self { capacity, log: Mutex::default(), slots: Mutex::default(), clock: AtomicU64::new(0) }
    }

    fn log(&self) -> std::sync::MutexGuard<'_, ChangeLog> {
        self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Scope), Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Logs the memories a write changed. Called after its commit, whatever the commit answered.
    pub(super) fn record(&self, changes: impl IntoIterator<Item = Change>) {
        let mut log = self.log();
        for change in changes {
            let seq = log.next;
            log.entries.push_back((seq, change));
            log.next += 1;
        }
        while log.entries.len() > LOG_CAPACITY {
            log.entries.pop_front();
        }
    }

    /// Forgets every index (after a reset).
    pub(super) fn clear(&self) {
        self.slots().clear();
    }

    /// The index of the query's scope, up to date with every write logged before the call; `None`
    /// when the scope is not indexed (no scope id, indexing off, or the scope is too large).
    pub(super) async fn fresh(&self, pool: &SqlitePool, query: &ScopedQuery) -> Result<Option<Arc<Slot>>> {
        if self.capacity == 0 || query.scope.pairs().is_empty() {
            return Ok(None);
        }
        let slot = Arc::clone(self.slots().entry((query.tenant.clone(), query.scope.clone())).or_default());
        slot.used.store(self.clock.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        Ok(self.bring_up_to_date(pool, query, &slot).await?.then_some(slot))
    }

    /// Builds or patches `slot`'s index; false when the scope is too large to index.
    async fn bring_up_to_date(&self, pool: &SqlitePool, query: &ScopedQuery, slot: &Arc<Slot>) -> Result<bool> {
        let current = || {
            let next = self.log().next;
            slot.read().as_ref().is_some_and(|index| index.as_of == next)
        };
        if current() {
            return Ok(true);
        }
        let _loading = slot.loading.lock().await;
        if current() {
            return Ok(true);
        }
        let behind = slot
            .read()
            .as_ref()
            .map(|index| (self.changed_since(index.as_of, query, |id| index.position.contains_key(id)), index.len()));
        if let Some((Some((next, ids)), held)) = behind {
            if ids.len() <= PATCH_MIN.max(held / 4) {
                let rows = load_ids(pool, query, &ids).await?;
                let entities = if ids.is_empty() { None } else { Some(load_entities(pool, query).await?) };
                let mut guard = slot.index.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(index) = guard.as_mut() {
                    index.patch(&ids, rows, entities);
                    index.as_of = next;
                }
                drop(guard);
                self.make_room(slot);
                return Ok(true);
            }
        }
        // Built from scratch: first use, or too far behind.
        if scope_size(pool, query).await? > self.capacity {
            self.slots().remove(&(query.tenant.clone(), query.scope.clone()));
            return Ok(false);
        }
        let as_of = self.log().next;
        let index = ScopeIndex::load(pool, query, as_of).await?;
        *slot.index.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(index);
        self.make_room(slot);
        Ok(true)
    }

    /// The log's next sequence number and the ids logged since `as_of` that may concern the
    /// query's scope (its scope, an unknown one, or an id the index holds); `None` when the log
    /// no longer reaches back that far.
    fn changed_since(
        &self,
        as_of: u64,
        query: &ScopedQuery,
        present: impl Fn(&Uuid) -> bool,
    ) -> Option<(u64, Vec<Uuid>)> {
        let log = self.log();
        if log.entries.front().is_some_and(|(oldest, _)| *oldest > as_of) {
            return None;
        }
        let mut seen = HashSet::new();
        let ids = log
            .entries
            .iter()
            .skip_while(|(seq, _)| *seq < as_of)
            .map(|(_, change)| change)
            .filter(|change| {
                change.tenant.as_ref().is_none_or(|tenant| *tenant == query.tenant)
                    && (change.scope.as_ref().is_none_or(|scope| within(scope, &query.scope)) || present(&change.id))
            })
            .map(|change| change.id)
            .filter(|id| seen.insert(*id))
            .collect();
        Some((log.next, ids))
    }

    /// Drops the least recently searched indexes (never `keep`) until all fit the capacity.
    fn make_room(&self, keep: &Arc<Slot>) {
        let mut slots = self.slots();
        let size = |slot: &Slot| slot.read().as_ref().map_or(0, ScopeIndex::len);
        let mut total: usize = slots.values().map(|slot| size(slot)).sum();
        while total > self.capacity {
            let oldest = slots
                .iter()
                .filter(|(_, slot)| !Arc::ptr_eq(slot, keep))
                .min_by_key(|(_, slot)| slot.used.load(Ordering::Relaxed))
                .map(|(key, slot)| (key.clone(), size(slot)));
            let Some((key, held)) = oldest else { break };
            slots.remove(&key);
            total -= held;
        }
    }
}

/// Whether a memory of scope `memory` is in the query scope `scope` (every id the query sets is
/// the memory's).
fn within(memory: &Scope, scope: &Scope) -> bool {
    [(&scope.user_id, &memory.user_id), (&scope.agent_id, &memory.agent_id), (&scope.run_id, &memory.run_id)]
        .into_iter()
        .all(|(wanted, held)| wanted.is_none() || wanted == held)
}

/// Memories in the query's scope, from the statistics the triggers keep.
async fn scope_size(pool: &SqlitePool, query: &ScopedQuery) -> Result<usize> {
    let (sql, binds) = where_clause(Sqlite, &query.scope_only(), 1).into_parts();
    let statement = format!("select coalesce(sum(docs), 0) from keyword_stats where {sql}");
    let docs: i64 = bind_all(sqlx::query(&statement), &binds).fetch_one(pool).await?.try_get(0)?;
    Ok(usize::try_from(docs).unwrap_or(usize::MAX))
}

async fn load_entities(pool: &SqlitePool, query: &ScopedQuery) -> Result<ScopeEntities> {
    let mut connection = pool.acquire().await?;
    scope_entities(&mut connection, &query.tenant, &query.scope, false).await
}

/// What the index keeps of one memory row.
struct Loaded {
    id: Uuid,
    expiration: Option<NaiveDate>,
    hidden: bool,
    doc_len: u32,
    text_lemmatized: String,
    embedding: Vec<f32>,
    links: Vec<String>,
}

const LOADED_COLUMNS: &str =
    "id, user_id, agent_id, run_id, expiration_date, status, doc_len, text_lemmatized, embedding";

/// Decodes a row of [`LOADED_COLUMNS`], with its scope.
fn loaded(row: &sqlx::sqlite::SqliteRow) -> Result<(Loaded, Scope)> {
    let id: String = row.try_get(0)?;
    let expiration: Option<String> = row.try_get(4)?;
    let status: String = row.try_get(5)?;
    let doc_len: i64 = row.try_get(6)?;
    let bytes: &[u8] = row.try_get(8)?;
    let scope = Scope { user_id: row.try_get(1)?, agent_id: row.try_get(2)?, run_id: row.try_get(3)? };
    Ok((
        Loaded {
            id: parse_id(&id)?,
            expiration: expiration
                .map(|date| NaiveDate::parse_from_str(&date, "%Y-%m-%d"))
                .transpose()
                .map_err(|error| Error::Internal(format!("stored expiration of {id}: {error}")))?,
            hidden: matches!(status.as_str(), "superseded" | "retired"),
            doc_len: u32::try_from(doc_len).unwrap_or(0),
            text_lemmatized: row.try_get(7)?,
            embedding: decode_embedding(bytes),
            links: Vec::new(),
        },
        scope,
    ))
}

/// Adds each link `(memory_id, entity_id)` to its loaded row.
fn attach_links(rows: &mut [Loaded], links: Vec<(String, String)>) -> Result<()> {
    let at: HashMap<Uuid, usize> = rows.iter().enumerate().map(|(index, row)| (row.id, index)).collect();
    for (memory_id, entity_id) in links {
        if let Some(index) = at.get(&parse_id(&memory_id)?) {
            rows[*index].links.push(entity_id);
        }
    }
    Ok(())
}

/// The rows of `ids` that are in the query's scope now (absent ones were deleted or moved).
async fn load_ids(pool: &SqlitePool, query: &ScopedQuery, ids: &[Uuid]) -> Result<Vec<Loaded>> {
    let mut transaction = pool.begin().await?;
    let mut rows = Vec::new();
    let mut links = Vec::new();
    for chunk in ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!("select {LOADED_COLUMNS} from memories where +tenant = ? and id in ({placeholders})");
        let mut fetch = sqlx::query(&statement).bind(&query.tenant);
        for id in chunk {
            fetch = fetch.bind(id.to_string());
        }
        for row in fetch.fetch_all(&mut *transaction).await? {
            let (row, scope) = loaded(&row)?;
            if within(&scope, &query.scope) {
                rows.push(row);
            }
        }
        let statement =
            format!("select memory_id, entity_id from memory_entity_links where memory_id in ({placeholders})");
        let mut fetch = sqlx::query_as::<_, (String, String)>(&statement);
        for id in chunk {
            fetch = fetch.bind(id.to_string());
        }
        links.extend(fetch.fetch_all(&mut *transaction).await?);
    }
    transaction.commit().await?;
    attach_links(&mut rows, links)?;
    Ok(rows)
}

/// Entry flags.
const ALIVE: u8 = 1;
const HIDDEN: u8 = 2;
const VECTOR: u8 = 4;

/// One scope's memories (every expiration and status: searches filter per query).
#[derive(Debug, Default)]
pub(super) struct ScopeIndex {
    /// Log position this index reflects: every change logged before it is applied.
    as_of: u64,
    dimension: usize,
    ids: Vec<Uuid>,
    /// `dimension` values per entry (zeros where the entry has no vector of that length).
    vectors: Vec<f32>,
    flags: Vec<u8>,
    expiration: Vec<Option<NaiveDate>>,
    doc_len: Vec<u32>,
    /// Live entries by id.
    position: HashMap<Uuid, u32>,
    /// Term → (entry, term frequency).
    postings: HashMap<String, Vec<(u32, u32)>>,
    /// Entity row id → entries linked to it.
    links: HashMap<String, Vec<u32>>,
    /// The scope's entity rows (every row under the query's ids).
    entities: ScopeEntities,
    /// Live entries and their total analysed length (the keyword statistics).
    docs: u64,
    total_len: u64,
}

impl ScopeIndex {
    /// Reads the scope's rows, links and entity rows in one read transaction.
    async fn load(pool: &SqlitePool, query: &ScopedQuery, as_of: u64) -> Result<Self> {
        let (sql, binds) = where_clause(Sqlite, &query.scope_only(), 1).into_parts();
        let mut transaction = pool.begin().await?;
        let statement = format!("select {LOADED_COLUMNS} from memories where {sql}");
        let mut rows = Vec::new();
        for row in bind_all(sqlx::query(&statement), &binds).fetch_all(&mut *transaction).await? {
            rows.push(loaded(&row)?.0);
        }
        let statement = format!(
            "select memory_id, entity_id from memory_entity_links where memory_id in (select id from memories where {sql})"
        );
        let links = bind_all(sqlx::query(&statement), &binds)
            .fetch_all(&mut *transaction)
            .await?
            .iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect::<Result<Vec<(String, String)>>>()?;
        let entities = scope_entities(&mut transaction, &query.tenant, &query.scope, false).await?;
        transaction.commit().await?;
        attach_links(&mut rows, links)?;
        let mut index = Self { as_of, entities, ..Self::default() };
        index.dimension = rows.first().map_or(0, |row| row.embedding.len());
        for row in rows {
            index.push(row);
        }
        Ok(index)
    }

    /// Live entries.
    pub(super) fn len(&self) -> usize {
        self.position.len()
    }

    fn push(&mut self, row: Loaded) {
        let Ok(entry) = u32::try_from(self.ids.len()) else { return };
        if self.dimension == 0 {
            self.dimension = row.embedding.len();
        }
        let mut flags = ALIVE;
        if row.hidden {
            flags |= HIDDEN;
        }
        if row.embedding.len() == self.dimension {
            flags |= VECTOR;
            self.vectors.extend_from_slice(&row.embedding);
        } else {
            self.vectors.extend(std::iter::repeat_n(0.0, self.dimension));
        }
        for (term, tf) in term_frequencies(&row.text_lemmatized) {
            self.postings.entry(term).or_default().push((entry, tf));
        }
        for entity in row.links {
            self.links.entry(entity).or_default().push(entry);
        }
        self.ids.push(row.id);
        self.flags.push(flags);
        self.expiration.push(row.expiration);
        self.doc_len.push(row.doc_len);
        self.position.insert(row.id, entry);
        self.docs += 1;
        self.total_len += u64::from(row.doc_len);
    }

    /// Replaces the entries of `changed` by `rows` (the ones still in the scope), and the entity
    /// rows when given.
    fn patch(&mut self, changed: &[Uuid], rows: Vec<Loaded>, entities: Option<ScopeEntities>) {
        for id in changed {
            if let Some(entry) = self.position.remove(id) {
                let entry = entry as usize;
                self.flags[entry] &= !ALIVE;
                self.docs -= 1;
                self.total_len -= u64::from(self.doc_len[entry]);
            }
        }
        for row in rows {
            self.push(row);
        }
        if let Some(entities) = entities {
            self.entities = entities;
        }
        let dead = self.ids.len() - self.position.len();
        if dead > TOMBSTONES_MIN && dead > self.position.len() {
            self.compact();
        }
    }

    /// Drops the tombstones.
    fn compact(&mut self) {
        let mut moved: Vec<Option<u32>> = vec![None; self.ids.len()];
        let mut next = 0u32;
        let dimension = self.dimension;
        let mut vectors = Vec::with_capacity(self.position.len() * dimension);
        let (mut ids, mut flags, mut expiration, mut doc_len) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (entry, slot) in moved.iter_mut().enumerate() {
            if self.flags[entry] & ALIVE == 0 {
                continue;
            }
            *slot = Some(next);
            next += 1;
            ids.push(self.ids[entry]);
            flags.push(self.flags[entry]);
            expiration.push(self.expiration[entry]);
            doc_len.push(self.doc_len[entry]);
            vectors.extend_from_slice(&self.vectors[entry * dimension..(entry + 1) * dimension]);
        }
        for list in self.postings.values_mut() {
            *list = list.iter().filter_map(|(entry, tf)| moved[*entry as usize].map(|entry| (entry, *tf))).collect();
        }
        self.postings.retain(|_, list| !list.is_empty());
        for list in self.links.values_mut() {
            *list = list.iter().filter_map(|entry| moved[*entry as usize]).collect();
        }
        self.links.retain(|_, list| !list.is_empty());
        self.position = ids.iter().enumerate().map(|(entry, id)| (*id, entry as u32)).collect();
        (self.ids, self.vectors, self.flags, self.expiration, self.doc_len) =
            (ids, vectors, flags, expiration, doc_len);
    }

    fn alive(&self, entry: usize) -> bool {
        self.flags[entry] & ALIVE != 0
    }

    /// Whether the query shows a live entry (expiration and supersession, as `where_clause`).
    fn shown(&self, query: &ScopedQuery, entry: usize) -> bool {
        (query.include_superseded || self.flags[entry] & HIDDEN == 0)
            && (query.show_expired || self.expiration[entry].is_none_or(|date| date >= query.today))
    }

    /// The `limit` shown memories closest to `vector` with a score of at least `threshold`, best
    /// first; among `only` when given (ids a filter let through).
    pub(super) fn dense(
        &self,
        query: &ScopedQuery,
        vector: &[f32],
        limit: usize,
        threshold: f32,
        only: Option<&[Uuid]>,
    ) -> Vec<Candidate> {
        let mut heap = std::collections::BinaryHeap::with_capacity(limit + 1);
        if vector.len() != self.dimension || limit == 0 {
            return Vec::new();
        }
        let mut consider = |entry: usize| {
            if self.flags[entry] & (ALIVE | VECTOR) != (ALIVE | VECTOR) || !self.shown(query, entry) {
                return;
            }
            let stored = &self.vectors[entry * self.dimension..(entry + 1) * self.dimension];
            // Vectors are unit length, so the dot product is the cosine; clipped to [0, 1] like Mem0.
            let score = dot(stored, vector).clamp(0.0, 1.0);
            if score < threshold
                || heap.len() == limit && heap.peek().is_some_and(|weakest: &Candidate| score < weakest.score)
            {
                return;
            }
            heap.push(Candidate { score, id: self.ids[entry] });
            if heap.len() > limit {
                heap.pop();
            }
        };
        match only {
            Some(ids) => ids.iter().filter_map(|id| self.position.get(id)).for_each(|entry| consider(*entry as usize)),
            None => (0..self.ids.len()).for_each(consider),
        }
        heap.into_sorted_vec()
    }

    /// The keyword statistics of `terms` over the scope, and the `limit` shown memories with the
    /// best BM25 (ties by id), as the SQL of `KeywordIndex::keyword_candidates` computes them.
    pub(super) fn keywords(&self, query: &ScopedQuery, terms: &[String], limit: usize) -> KeywordCandidates {
        let avg_doc_len = if self.docs > 0 { self.total_len as f64 / self.docs as f64 } else { 0.0 };
        let mut stats = KeywordStats { doc_count: self.docs, avg_doc_len, document_frequency: HashMap::new() };
        for term in terms {
            let count = self
                .postings
                .get(term)
                .map_or(0, |list| list.iter().filter(|(entry, _)| self.alive(*entry as usize)).count());
            if count > 0 {
                stats.document_frequency.insert(term.clone(), count as u64);
            }
        }
        if self.docs == 0 || limit == 0 || stats.document_frequency.is_empty() {
            return KeywordCandidates { stats, top: Vec::new() };
        }
        let (weights, base, per_length) = Bm25::new(&stats, terms).sql_weights();
        // Summed per entry in a dense array (a common term is in thousands of memories).
        let mut scores: Vec<f64> = vec![0.0; self.ids.len()];
        let mut touched: Vec<bool> = vec![false; self.ids.len()];
        let mut matching: Vec<usize> = Vec::new();
        for (term, weight) in &weights {
            for (entry, tf) in self.postings.get(term).map_or(&[][..], Vec::as_slice) {
                let at = *entry as usize;
                if !self.alive(at) || !self.shown(query, at) {
                    continue;
                }
                if !touched[at] {
                    touched[at] = true;
                    matching.push(at);
                }
                let tf = f64::from(*tf);
                scores[at] += weight * tf / (tf + base + per_length * f64::from(self.doc_len[at]));
            }
        }
        let mut top: Vec<(Uuid, f64)> = matching.into_iter().map(|entry| (self.ids[entry], scores[entry])).collect();
        let order = |a: &(Uuid, f64), b: &(Uuid, f64)| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0));
        if top.len() > limit {
            top.select_nth_unstable_by(limit, order);
            top.truncate(limit);
        }
        top.sort_by(order);
        KeywordCandidates { stats, top }
    }

    /// The links of `memory_ids` to the `matched` entity rows, one hit per link and probe (as the
    /// SQL of `EntityIndex::entity_links`).
    pub(super) fn links_of(&self, matched: &[(String, Vec<usize>)], memory_ids: &[Uuid]) -> Vec<EntityHit> {
        let wanted: HashSet<u32> = memory_ids.iter().filter_map(|id| self.position.get(id).copied()).collect();
        let mut hits = Vec::new();
        for (entity, probes) in matched {
            for entry in self.links.get(entity).map_or(&[][..], Vec::as_slice) {
                if wanted.contains(entry) && self.alive(*entry as usize) {
                    let memory_id = self.ids[*entry as usize];
                    hits.extend(probes.iter().map(|probe| EntityHit { memory_id, probe: *probe }));
                }
            }
        }
        hits
    }

    /// The entity candidates of the probes, as the SQL of `EntityIndex::entity_candidates`
    /// computes them without a metadata filter.
    pub(super) fn entities(
        &self,
        query: &ScopedQuery,
        probes: &[EntityProbe],
        threshold: f32,
        limit: usize,
    ) -> EntityCandidates {
        let mut found = EntityCandidates { linked: vec![0; probes.len()], ..EntityCandidates::default() };
        if probes.is_empty() {
            return found;
        }
        for (id, normalized, embedding) in &self.entities {
            let matching = matching_probes(probes, normalized, embedding, threshold);
            if !matching.is_empty() {
                found.matched.push((id.clone(), matching));
            }
        }
        cap_matched(&mut found.matched);
        if found.matched.is_empty() {
            return found;
        }
        let linked = |entity: &String| {
            self.links
                .get(entity)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(|entry| *entry as usize)
                .filter(|entry| self.alive(*entry))
        };
        // Distinct memories per probe, over every link of the scope (a stamp per entry instead of
        // a set: a common name links thousands of memories).
        let mut stamp: Vec<u32> = vec![0; self.ids.len()];
        for (probe, count) in found.linked.iter_mut().enumerate() {
            let mark = u32::try_from(probe + 1).unwrap_or(u32::MAX);
            for (entity, matching) in &found.matched {
                if matching.contains(&probe) {
                    for entry in linked(entity) {
                        if stamp[entry] != mark {
                            stamp[entry] = mark;
                            *count += 1;
                        }
                    }
                }
            }
        }
        if limit == 0 {
            return found;
        }
        let weights = EntityScores::weights(&found.linked, self.docs);
        // Summed over links (a memory linked to two rows one probe matches counts it twice here,
        // once in its score), as the SQL does.
        let mut scores: Vec<f64> = vec![0.0; self.ids.len()];
        let mut touched: Vec<usize> = Vec::new();
        for (entity, matching) in &found.matched {
            let weight: f64 = matching.iter().map(|probe| weights.get(*probe).copied().unwrap_or(0.0)).sum();
            for entry in linked(entity) {
                if stamp[entry] != u32::MAX {
                    stamp[entry] = u32::MAX;
                    touched.push(entry);
                }
                scores[entry] += weight;
            }
        }
        let order =
            |a: &usize, b: &usize| scores[*b].total_cmp(&scores[*a]).then_with(|| self.ids[*b].cmp(&self.ids[*a]));
        touched.retain(|entry| self.shown(query, *entry));
        if touched.len() > limit {
            touched.select_nth_unstable_by(limit, order);
            touched.truncate(limit);
        }
        touched.sort_by(order);
        // The probes of each ranked memory: the matched rows it links to.
        let mut rank: Vec<u32> = vec![0; self.ids.len()];
        for (position, entry) in touched.iter().enumerate() {
            rank[*entry] = u32::try_from(position + 1).unwrap_or(u32::MAX);
        }
        let mut probes_of: Vec<Vec<usize>> = vec![Vec::new(); touched.len()];
        for (entity, matching) in &found.matched {
            for entry in linked(entity) {
                if rank[entry] > 0 {
                    probes_of[rank[entry] as usize - 1].extend(matching);
                }
            }
        }
        let ranked: Vec<(Uuid, Vec<usize>)> = touched
            .iter()
            .zip(probes_of)
            .map(|(entry, mut probes)| {
                probes.sort_unstable();
                probes.dedup();
                (self.ids[*entry], probes)
            })
            .collect();
        found.hits = ranked
            .into_iter()
            .flat_map(|(memory_id, probes)| probes.into_iter().map(move |probe| EntityHit { memory_id, probe }))
            .collect();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(user: Option<&str>, agent: Option<&str>) -> Scope {
        Scope { user_id: user.map(str::to_owned), agent_id: agent.map(str::to_owned), run_id: None }
    }

    #[test]
    fn a_memory_is_within_the_scopes_whose_ids_it_carries() {
        let memory = scope(Some("alice"), Some("bot"));
        assert!(within(&memory, &scope(Some("alice"), None)));
        assert!(within(&memory, &scope(Some("alice"), Some("bot"))));
        assert!(within(&memory, &scope(None, Some("bot"))));
        assert!(!within(&memory, &scope(Some("bob"), None)));
        assert!(!within(&scope(Some("alice"), None), &scope(Some("alice"), Some("bot"))));
    }

    fn row(id: Uuid, text: &str, vector: [f32; 2]) -> Loaded {
        Loaded {
            id,
            expiration: None,
            hidden: false,
            doc_len: crate::store::doc_len(text),
            text_lemmatized: text.to_owned(),
            embedding: vector.to_vec(),
            links: vec!["e1".to_owned()],
        }
    }

    #[test]
    fn patching_and_compacting_keep_only_live_entries() {
        let mut index = ScopeIndex { dimension: 2, ..ScopeIndex::default() };
        let ids: Vec<Uuid> = (0..3000).map(|_| Uuid::now_v7()).collect();
        for id in &ids {
            index.push(row(*id, "violin lesson", [1.0, 0.0]));
        }
        // Every entry but the last replaced twice: the tombstones pass the threshold and go.
        for _ in 0..2 {
            let rows = ids[..2999].iter().map(|id| row(*id, "piano", [0.0, 1.0])).collect();
            index.patch(&ids[..2999], rows, None);
        }
        assert_eq!(index.len(), 3000);
        assert!(index.ids.len() < 3 * 3000, "tombstones were compacted");
        assert_eq!(index.docs, 3000);
        let query = ScopedQuery {
            tenant: "t".into(),
            scope: scope(Some("alice"), None),
            filter: None,
            show_expired: false,
            today: chrono::Utc::now().date_naive(),
            include_superseded: false,
        };
        let best = index.dense(&query, &[1.0, 0.0], 5, 0.5, None);
        assert_eq!(best.iter().map(|candidate| candidate.id).collect::<Vec<_>>(), vec![ids[2999]]);
        let found = index.keywords(&query, &["violin".to_owned()], 10);
        assert_eq!(found.stats.document_frequency.get("violin"), Some(&1));
        assert_eq!(found.top.len(), 1);
        assert_eq!(index.links.get("e1").map(Vec::len), Some(3000));
    }
}
