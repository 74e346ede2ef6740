//! An in-process search index per scope: the scope's embeddings in one contiguous block, its
//! keyword postings and its entity links, so that a search reads no rows from the database to
//! find its candidates (the rows it returns are still read by id).
//!
//! The database stays the only source of truth. Every committed write leaves the ids it changed
//! in a change feed ([`IndexSource`]: an in-process log for the embedded store, a table filled by
//! triggers for Postgres, which other servers on the same database write too); before a search
//! uses a scope's index it reloads, from the database, the rows of the changes fed since it last
//! did. A write is in the feed before `apply` returns, so a caller always finds its own writes.
//! An index that fell too far behind (the feed no longer reaches back, or more changed than is
//! worth patching) is rebuilt.
//!
//! Bounded: the indexes together hold at most `capacity` memories (the least recently searched
//! scopes make room); a scope larger than that is searched through SQL as before.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Instant;

use async_trait::async_trait;
use chrono::NaiveDate;
use uuid::Uuid;

use crate::error::Result;
use crate::retrieval::{Bm25, EntityScores};
use crate::scope::Scope;
use crate::store::{
    cap_matched, dot, matching_probes, term_frequencies, EntityCandidates, EntityHit, EntityProbe, FastMap,
    KeywordCandidates, KeywordStats, ScopedQuery,
};

/// Changed memories worth patching into an index in one go (else it is rebuilt), at least.
const PATCH_MIN: usize = 256;
/// Entries from which a search of an index tells the runtime it blocks (`block_in_place`): a few
/// milliseconds of CPU without an await would hold up the other tasks of its worker. A writer next
/// to a stream of searches over 10,000 memories managed 2 adds/s without; 196 with. (The keyword
/// and entity searches of a hybrid search read far fewer entries, but running them inline rather
/// than blocking made hybrid searches over 10,000 memories ~15 % slower: once one search of a task
/// has blocked, the next ones cost little more.)
const BLOCKING_MIN: usize = 2_000;
/// Removed entries an index keeps as tombstones before it is compacted.
const TOMBSTONES_MIN: usize = 1024;

/// One row a committed write changed: a memory (inserted, updated, deleted, relinked or
/// restated) or an entity row of a scope.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// The row's tenant, when the feed knows it.
    pub(crate) tenant: Option<String>,
    pub(crate) id: Uuid,
    /// The row's scope, when the feed knows it.
    pub(crate) scope: Option<Scope>,
}

/// Entity rows of a scope: (id, normalised name, embedding).
pub(crate) type ScopeEntities = Vec<(String, String, Vec<f32>)>;

/// What the index keeps of one memory row.
pub(crate) struct Loaded {
    pub(crate) id: Uuid,
    pub(crate) expiration: Option<NaiveDate>,
    /// Superseded or retired.
    pub(crate) hidden: bool,
    pub(crate) doc_len: u32,
    pub(crate) text_lemmatized: String,
    pub(crate) embedding: Vec<f32>,
    /// Entity row ids it links to.
    pub(crate) links: Vec<String>,
    /// The row version the store can compare later (Postgres: the tuple's `xmin`; 0 elsewhere).
    pub(crate) version: u64,
}

/// Where indexes read their rows and learn what changed: positions in a change feed only grow,
/// and a row changed by a write committed after position `p` was read is fed at a position of
/// `p` or later.
#[async_trait]
pub(crate) trait IndexSource: Send + Sync + std::fmt::Debug + 'static {
    /// Whether the feed is known, without I/O, to hold nothing since `as_of` (`false` when it
    /// cannot tell).
    fn unchanged_since(&self, as_of: u64) -> bool;

    /// The feed's position now and the changes of the tenant fed since `as_of` (some may concern
    /// other scopes); `None` when the feed no longer reaches back to `as_of`.
    async fn changes_since(&self, as_of: u64, tenant: &str) -> Result<Option<(u64, Vec<Change>)>>;

    /// Memories in the query's scope (every status and expiration).
    async fn scope_size(&self, query: &ScopedQuery) -> Result<usize>;

    /// The scope's rows with their links and its entity rows, read together, and the feed
    /// position they reflect (every change fed before it is in them).
    async fn load_scope(&self, query: &ScopedQuery) -> Result<(u64, Vec<Loaded>, ScopeEntities)>;

    /// The rows of `ids` that are in the query's scope now, with their links (absent ones were
    /// deleted or moved), and the scope's entity rows.
    async fn load_ids(&self, query: &ScopedQuery, ids: &[Uuid]) -> Result<(Vec<Loaded>, ScopeEntities)>;
}

/// The indexes of the scopes searched lately, and the feed they catch up from.
#[derive(Debug)]
pub(crate) struct ScopeIndexes<S> {
    /// Most memories held by all indexes together.
    capacity: usize,
    /// Most memories of one indexed scope.
    scope_max: usize,
    source: S,
    slots: Mutex<HashMap<(String, Scope), Arc<Slot>>>,
    /// Ticks for "least recently searched".
    clock: AtomicU64,
}

/// One scope's index, built on first use.
#[derive(Debug, Default)]
pub(crate) struct Slot {
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
    fn run<T>(&self, work: impl FnOnce(&ScopeIndex) -> T) -> Option<T> {
        let large = self.read().as_ref().is_some_and(|index| index.ids.len() >= BLOCKING_MIN);
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if large && multi_thread {
            // The worker hands its other tasks to another thread while this runs.
            return tokio::task::block_in_place(|| self.read().as_ref().map(work));
        }
        self.read().as_ref().map(work)
    }

    /// [`ScopeIndex::dense`] (every entry, or `only`).
    pub(crate) fn dense(
        &self,
        query: &ScopedQuery,
        vector: &[f32],
        limit: usize,
        threshold: f32,
        only: Option<&[Uuid]>,
    ) -> Option<Vec<Candidate>> {
        self.run(|index| index.dense(query, vector, limit, threshold, only))
    }

    /// [`ScopeIndex::keywords`].
    pub(crate) fn keywords(&self, query: &ScopedQuery, terms: &[String], limit: usize) -> Option<KeywordCandidates> {
        self.run(|index| index.keywords(query, terms, limit))
    }

    /// [`ScopeIndex::entities`].
    pub(crate) fn entities(
        &self,
        query: &ScopedQuery,
        probes: &[EntityProbe],
        threshold: f32,
        limit: usize,
    ) -> Option<EntityCandidates> {
        self.run(|index| index.entities(query, probes, threshold, limit))
    }

    /// [`ScopeIndex::links_of`].
    pub(crate) fn links_of(&self, matched: &[(String, Vec<usize>)], memory_ids: &[Uuid]) -> Option<Vec<EntityHit>> {
        self.run(|index| index.links_of(matched, memory_ids))
    }

    /// The row version the index holds of each of `ids` (`None`: not in the scope's index).
    pub(crate) fn versions_of(&self, ids: &[Uuid]) -> Vec<Option<u64>> {
        let guard = self.read();
        ids.iter().map(|id| guard.as_ref().and_then(|index| index.version_of(id))).collect()
    }
}

impl<S: IndexSource> ScopeIndexes<S> {
    /// Whether indexes are kept at all.
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Indexes holding at most `capacity` memories together (0: none, every search uses SQL).
    pub(crate) fn new(capacity: usize, source: S) -> Self {
        Self { capacity, scope_max: capacity, source, slots: Mutex::default(), clock: AtomicU64::new(0) }
    }

    /// The same, indexing no scope of more than `scope_max` memories.
    pub(crate) fn with_scope_max(capacity: usize, scope_max: usize, source: S) -> Self {
        Self { scope_max: scope_max.min(capacity), ..Self::new(capacity, source) }
    }

    /// The feed and loader.
    pub(crate) fn source(&self) -> &S {
        &self.source
    }

    /// The embeddings the tenant's indexes hold for `wanted` rows (id and version), where they
    /// hold that very version of the row.
    pub(crate) fn vectors_of(&self, tenant: &str, wanted: &[(Uuid, u64)]) -> HashMap<Uuid, Vec<f32>> {
        let slots: Vec<Arc<Slot>> =
            self.slots().iter().filter(|((held, _), _)| held == tenant).map(|(_, slot)| Arc::clone(slot)).collect();
        let mut found = HashMap::new();
        for slot in slots {
            let guard = slot.read();
            let Some(index) = guard.as_ref() else { continue };
            for (id, version) in wanted {
                if let Some(vector) = index.vector_of(id, *version) {
                    found.entry(*id).or_insert_with(|| vector.to_vec());
                }
            }
        }
        found
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Scope), Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets every index (after a reset).
    pub(crate) fn clear(&self) {
        self.slots().clear();
    }

    /// The index of the query's scope, up to date with every write fed before the call; `None`
    /// when the scope is not indexed (no scope id, indexing off, or the scope is too large).
    pub(crate) async fn fresh(&self, query: &ScopedQuery) -> Result<Option<Arc<Slot>>> {
        if self.capacity == 0 || query.scope.pairs().is_empty() {
            return Ok(None);
        }
        let slot = Arc::clone(self.slots().entry((query.tenant.clone(), query.scope.clone())).or_default());
        slot.used.store(self.clock.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        Ok(self.bring_up_to_date(query, &slot).await?.then_some(slot))
    }

    /// The index of the query's scope when one is held, brought up to date as [`Self::fresh`]
    /// would; `None` without I/O when none is held.
    pub(crate) async fn fresh_if_held(&self, query: &ScopedQuery) -> Result<Option<Arc<Slot>>> {
        let slot = self.slots().get(&(query.tenant.clone(), query.scope.clone())).map(Arc::clone);
        let Some(slot) = slot.filter(|slot| slot.read().is_some()) else { return Ok(None) };
        Ok(self.bring_up_to_date(query, &slot).await?.then_some(slot))
    }

    /// Builds or patches `slot`'s index; false when the scope is too large to index.
    ///
    /// Searches of a scope that overlap share one look at the feed, and so do the calls of one
    /// search (`fresh_since`): a look that began after a search did saw every write committed
    /// before the search began.
    async fn bring_up_to_date(&self, query: &ScopedQuery, slot: &Arc<Slot>) -> Result<bool> {
        let began = query.fresh_since.unwrap_or_else(Instant::now);
        let current = || {
            slot.read().as_ref().is_some_and(|index| {
                self.source.unchanged_since(index.as_of) || index.checked.is_some_and(|at| at >= began)
            })
        };
        if current() {
            return Ok(true);
        }
        let _loading = slot.loading.lock().await;
        if current() {
            return Ok(true);
        }
        let as_of = slot.read().as_ref().map(|index| index.as_of);
        if let Some(as_of) = as_of {
            let checked = Instant::now();
            if let Some((next, changes)) = self.source.changes_since(as_of, &query.tenant).await? {
                let (ids, held) = {
                    let guard = slot.read();
                    let index = guard.as_ref();
                    let present = |id: &Uuid| index.is_some_and(|index| index.position.contains_key(id));
                    (relevant(&changes, query, present), index.map_or(0, ScopeIndex::len))
                };
                if ids.len() <= PATCH_MIN.max(held / 4) {
                    let loaded = if ids.is_empty() { None } else { Some(self.source.load_ids(query, &ids).await?) };
                    let mut guard = slot.index.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some(index) = guard.as_mut() {
                        if let Some((rows, entities)) = loaded {
                            index.patch(&ids, rows, Some(entities));
                        }
                        index.as_of = next;
                        index.checked = Some(checked);
                    }
                    drop(guard);
                    self.make_room(slot);
                    return Ok(true);
                }
            }
        }
        // Built from scratch: first use, or too far behind.
        if self.source.scope_size(query).await? > self.scope_max {
            self.slots().remove(&(query.tenant.clone(), query.scope.clone()));
            return Ok(false);
        }
        let checked = Instant::now();
        let (as_of, rows, entities) = self.source.load_scope(query).await?;
        let mut index = ScopeIndex::from_rows(as_of, rows, entities);
        index.checked = Some(checked);
        *slot.index.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(index);
        self.make_room(slot);
        Ok(true)
    }

    /// Drops the least recently searched indexes (never `keep`) until all fit the capacity. An
    /// empty scope counts as one memory, so scopes searched once with made-up ids cannot pile up.
    fn make_room(&self, keep: &Arc<Slot>) {
        let mut slots = self.slots();
        let size = |slot: &Slot| slot.read().as_ref().map_or(0, ScopeIndex::len).max(1);
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

/// The distinct ids of `changes` that may concern the query's scope: of its tenant (or an
/// unknown one) and of a scope within it (or an unknown one), or held by the index (`present`:
/// a memory that left the scope).
fn relevant(changes: &[Change], query: &ScopedQuery, present: impl Fn(&Uuid) -> bool) -> Vec<Uuid> {
    let mut seen = HashSet::new();
    changes
        .iter()
        .filter(|change| {
            change.tenant.as_ref().is_none_or(|tenant| *tenant == query.tenant)
                && (change.scope.as_ref().is_none_or(|scope| within(scope, &query.scope)) || present(&change.id))
        })
        .map(|change| change.id)
        .filter(|id| seen.insert(*id))
        .collect()
}

/// Whether a memory of scope `memory` is in the query scope `scope` (every id the query sets is
/// the memory's).
pub(crate) fn within(memory: &Scope, scope: &Scope) -> bool {
    [(&scope.user_id, &memory.user_id), (&scope.agent_id, &memory.agent_id), (&scope.run_id, &memory.run_id)]
        .into_iter()
        .all(|(wanted, held)| wanted.is_none() || wanted == held)
}

/// Adds each link `(memory_id, entity_id)` to its loaded row.
pub(crate) fn attach_links(rows: &mut [Loaded], links: impl IntoIterator<Item = (Uuid, String)>) {
    let at: HashMap<Uuid, usize> = rows.iter().enumerate().map(|(index, row)| (row.id, index)).collect();
    for (memory_id, entity_id) in links {
        if let Some(index) = at.get(&memory_id) {
            rows[*index].links.push(entity_id);
        }
    }
}

/// Min-heap entry keeping the best `limit` candidates.
pub(crate) struct Candidate {
    pub(crate) score: f32,
    pub(crate) id: Uuid,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    // Reversed so that BinaryHeap's top is the weakest candidate; ties keep the smaller id.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.score.total_cmp(&self.score).then_with(|| self.id.cmp(&other.id))
    }
}

/// Entry flags.
const ALIVE: u8 = 1;
const HIDDEN: u8 = 2;
const VECTOR: u8 = 4;

/// One scope's memories (every expiration and status: searches filter per query).
#[derive(Debug, Default)]
pub(crate) struct ScopeIndex {
    /// Feed position this index reflects: every change fed before it is applied.
    as_of: u64,
    /// When the look at the feed (or the load) that brought it to `as_of` began.
    checked: Option<Instant>,
    dimension: usize,
    ids: Vec<Uuid>,
    /// `dimension` values per entry (zeros where the entry has no vector of that length).
    vectors: Vec<f32>,
    flags: Vec<u8>,
    expiration: Vec<Option<NaiveDate>>,
    doc_len: Vec<u32>,
    versions: Vec<u64>,
    /// Live entries by id.
    position: FastMap<Uuid, u32>,
    /// Term → (entry, term frequency).
    postings: FastMap<String, Vec<(u32, u32)>>,
    /// Entity row id → entries linked to it.
    links: FastMap<String, Vec<u32>>,
    /// The scope's entity rows (every row under the query's ids).
    entities: ScopeEntities,
    /// Live entries and their total analysed length (the keyword statistics).
    docs: u64,
    total_len: u64,
}

impl ScopeIndex {
    /// An index of `rows` and `entities`, as of feed position `as_of`.
    fn from_rows(as_of: u64, rows: Vec<Loaded>, entities: ScopeEntities) -> Self {
        let mut index = Self { as_of, entities, ..Self::default() };
        index.dimension = rows.first().map_or(0, |row| row.embedding.len());
        for row in rows {
            index.push(row);
        }
        index
    }

    /// Live entries.
    pub(crate) fn len(&self) -> usize {
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
        self.versions.push(row.version);
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
        let mut versions = Vec::new();
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
            versions.push(self.versions[entry]);
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
        (self.ids, self.vectors, self.flags, self.expiration, self.doc_len, self.versions) =
            (ids, vectors, flags, expiration, doc_len, versions);
    }

    /// The embedding of row `id` when the index holds its version `version`.
    fn vector_of(&self, id: &Uuid, version: u64) -> Option<&[f32]> {
        let entry = *self.position.get(id)? as usize;
        (self.flags[entry] & VECTOR != 0 && self.versions[entry] == version)
            .then(|| &self.vectors[entry * self.dimension..(entry + 1) * self.dimension])
    }

    /// The version held of live row `id`.
    fn version_of(&self, id: &Uuid) -> Option<u64> {
        self.position.get(id).map(|entry| self.versions[*entry as usize])
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
    pub(crate) fn dense(
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
    pub(crate) fn keywords(&self, query: &ScopedQuery, terms: &[String], limit: usize) -> KeywordCandidates {
        let avg_doc_len = if self.docs > 0 { self.total_len as f64 / self.docs as f64 } else { 0.0 };
        let mut stats = KeywordStats { doc_count: self.docs, avg_doc_len, document_frequency: HashMap::new() };
        // Without tombstones every posting is live: the list's length is the count.
        let tombstones = self.ids.len() > self.position.len();
        for term in terms {
            let count = self.postings.get(term).map_or(0, |list| {
                if tombstones {
                    list.iter().filter(|(entry, _)| self.alive(*entry as usize)).count()
                } else {
                    list.len()
                }
            });
            if count > 0 {
                stats.document_frequency.insert(term.clone(), count as u64);
            }
        }
        if self.docs == 0 || limit == 0 || stats.document_frequency.is_empty() {
            return KeywordCandidates { stats, top: Vec::new() };
        }
        let (weights, base, per_length) = Bm25::new(&stats, terms).sql_weights();
        // Summed per entry in a dense array (a common term is in thousands of memories).
        // Every term's weight is positive, so a score of zero marks an entry no term reached.
        let mut scores: Vec<f64> = vec![0.0; self.ids.len()];
        let mut matching: Vec<u32> = Vec::new();
        for (term, weight) in &weights {
            for (entry, tf) in self.postings.get(term).map_or(&[][..], Vec::as_slice) {
                let at = *entry as usize;
                if !self.alive(at) || !self.shown(query, at) {
                    continue;
                }
                if scores[at] == 0.0 {
                    matching.push(*entry);
                }
                let tf = f64::from(*tf);
                scores[at] += weight * tf / (tf + base + per_length * f64::from(self.doc_len[at]));
            }
        }
        // Best score first, ties by the smaller id.
        let top = best_of(matching, limit, |entry| {
            (ordered(scores[entry as usize]), std::cmp::Reverse(self.ids[entry as usize].as_u128()))
        });
        let top = top.into_iter().map(|entry| (self.ids[entry as usize], scores[entry as usize])).collect();
        KeywordCandidates { stats, top }
    }

    /// The links of `memory_ids` to the `matched` entity rows, one hit per link and probe (as the
    /// SQL of `EntityIndex::entity_links`).
    pub(crate) fn links_of(&self, matched: &[(String, Vec<usize>)], memory_ids: &[Uuid]) -> Vec<EntityHit> {
        // A flag per entry rather than a set: a common name links thousands of memories.
        let mut wanted = vec![false; self.ids.len()];
        for entry in memory_ids.iter().filter_map(|id| self.position.get(id)) {
            wanted[*entry as usize] = true;
        }
        let mut hits = Vec::new();
        for (entity, probes) in matched {
            for entry in self.links.get(entity).map_or(&[][..], Vec::as_slice) {
                if wanted[*entry as usize] && self.alive(*entry as usize) {
                    let memory_id = self.ids[*entry as usize];
                    hits.extend(probes.iter().map(|probe| EntityHit { memory_id, probe: *probe }));
                }
            }
        }
        hits
    }

    /// The entity candidates of the probes, as the SQL of `EntityIndex::entity_candidates`
    /// computes them without a metadata filter.
    pub(crate) fn entities(
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
        let mut touched: Vec<u32> = Vec::new();
        for (entity, matching) in &found.matched {
            let weight: f64 = matching.iter().map(|probe| weights.get(*probe).copied().unwrap_or(0.0)).sum();
            for entry in linked(entity) {
                if stamp[entry] != u32::MAX {
                    stamp[entry] = u32::MAX;
                    touched.push(entry as u32);
                }
                scores[entry] += weight;
            }
        }
        touched.retain(|entry| self.shown(query, *entry as usize));
        // Best score first, ties by the larger id (as the SQL orders them).
        let touched: Vec<usize> =
            best_of(touched, limit, |entry| (ordered(scores[entry as usize]), self.ids[entry as usize].as_u128()))
                .into_iter()
                .map(|entry| entry as usize)
                .collect();
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

/// A key ordering `value` as [`f64::total_cmp`] does.
fn ordered(value: f64) -> i64 {
    let bits = value.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// The `limit` entries of `entries` with the largest `key`, largest first: one pass with a heap
/// of the best so far, whose weakest turns most entries away with one comparison (a common term
/// or name reaches thousands of entries, of which a search keeps a few dozen).
fn best_of<K: Ord>(entries: Vec<u32>, limit: usize, key: impl Fn(u32) -> K) -> Vec<u32> {
    use std::cmp::Reverse;
    let mut heap: std::collections::BinaryHeap<Reverse<(K, u32)>> =
        std::collections::BinaryHeap::with_capacity(limit.min(entries.len()) + 1);
    if limit == 0 {
        return Vec::new();
    }
    for entry in entries {
        let candidate = (key(entry), entry);
        if heap.len() < limit {
            heap.push(Reverse(candidate));
        } else if let Some(mut weakest) = heap.peek_mut() {
            if candidate > weakest.0 {
                *weakest = Reverse(candidate);
            }
        }
    }
    heap.into_sorted_vec().into_iter().map(|Reverse((_, entry))| entry).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(user: Option<&str>, agent: Option<&str>) -> Scope {
        Scope { user_id: user.map(str::to_owned), agent_id: agent.map(str::to_owned), run_id: None }
    }

    #[test]
    fn the_best_entries_come_first_ties_broken_by_the_key() {
        let values = [f64::NEG_INFINITY, -1.0, -0.0, 0.0, 1e-300, 1.0, f64::INFINITY, f64::NAN];
        for a in values {
            for b in values {
                assert_eq!(ordered(a).cmp(&ordered(b)), a.total_cmp(&b), "{a} vs {b}");
            }
        }
        let scores = [0.5, 2.0, 1.0, 2.0, 0.25, 2.0];
        // Best score first, ties by the smaller entry (as keywords breaks them by the smaller id).
        let key = |entry: u32| (ordered(scores[entry as usize]), std::cmp::Reverse(entry));
        assert_eq!(best_of((0..6).collect(), 4, key), vec![1, 3, 5, 2]);
        assert_eq!(best_of((0..6).rev().collect(), 2, key), vec![1, 3]);
        assert_eq!(best_of((0..6).collect(), 10, key), vec![1, 3, 5, 2, 0, 4]);
        assert!(best_of((0..6).collect(), 0, key).is_empty());
        assert!(best_of(Vec::new(), 3, key).is_empty());
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
            version: 1,
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
            fresh_since: None,
        };
        let best = index.dense(&query, &[1.0, 0.0], 5, 0.5, None);
        assert_eq!(best.iter().map(|candidate| candidate.id).collect::<Vec<_>>(), vec![ids[2999]]);
        let found = index.keywords(&query, &["violin".to_owned()], 10);
        assert_eq!(found.stats.document_frequency.get("violin"), Some(&1));
        assert_eq!(found.top.len(), 1);
        assert_eq!(index.links.get("e1").map(Vec::len), Some(3000));
        // Embeddings are handed out for the version held only, after compaction too.
        let patched = Loaded { version: 2, ..row(ids[0], "cello", [0.6, 0.8]) };
        index.patch(&ids[..1], vec![patched], None);
        assert_eq!(index.vector_of(&ids[0], 2), Some(&[0.6, 0.8][..]));
        assert_eq!(index.vector_of(&ids[0], 1), None);
        assert_eq!(index.vector_of(&ids[2999], 1), Some(&[1.0, 0.0][..]));
    }
}
