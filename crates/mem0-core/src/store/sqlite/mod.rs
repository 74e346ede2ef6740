//! The embedded vector store: one SQLite file (WAL) with typed, indexed columns for tenant, scope ids
//! and timestamps, metadata as JSON, embeddings as little-endian f32 blobs, and exact cosine search
//! over the scope-filtered rows.
//!
//! Search finds its candidates in an in-process index of the query's scope (`store/index.rs`: the
//! scope's embeddings in one block, keyword postings, entity links and rows), brought up to date
//! from the ids each committed write changed before it is used; with a metadata filter, SQLite
//! lists the ids that pass and the index scores them. Scopes too large for the index are searched
//! as before: the ids from SQL in one aggregate row, scored against embeddings in a bounded cache
//! (reading every blob row by row costs ~6 µs a row through the driver, ten times the cosine
//! arithmetic), BM25 and entity weights summed in SQL. The rows a search returns (and the
//! candidates hybrid search scores) come from a bounded cache of whole rows (`cache.rs`; writes
//! drop what they change, including the rows whose state a key chain's resolution changed). The
//! caches and indexes assume this process is the only writer of the file, which is how the
//! embedded store is used.

use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

mod codec;
mod index_source;
mod write;

use self::codec::{decode_embedding, from_micros, micros, row_to_record};
use self::index_source::SqliteSource;
use self::write::{apply_in, scope_entities, settle_in};
use super::sql::{where_clause, Bind, Sqlite};
use super::{cap_matched, AccessLog, EntityIndex, Journal, KeywordIndex, MemoryRows, VectorIndex};
use super::{
    dot, matching_probes, Applied, Cursor, EntityCandidates, EntityHit, EntityProbe, JournalEntry, KeywordCandidates,
    KeywordStats, Page, ScopeKind, ScopeSummary, ScopedQuery, ScoredRecord, WriteSet,
};
use crate::decay::MemoryRead;
use crate::error::{Error, Result};
use crate::retrieval::{Bm25, EntityScores};
use crate::store::cache::{RecordCache, SharedVector, VectorCache};
use crate::store::index::{Candidate, Change, ScopeIndexes};
use crate::types::{MemoryRecord, MemoryStatus};

/// The migrations of the embedded store (`migrations/sqlite/memories`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite/memories");

/// The memory columns, in the order of every insert and select.
const COLUMNS: &str = "id, tenant, user_id, agent_id, run_id, memory, hash, metadata, created_at, updated_at, \
                       expiration_date, attributed_to, role, actor_id, memory_type, linked_memory_ids, entities, \
                       text_lemmatized, doc_len, embedding, source_type, source_actor, source_app, evidence_ref, \
                       confidence, state_key, status, superseded_by, valid_to, event_time";

/// Default number of embeddings kept in memory (about 150 MB at 384 dimensions).
pub const DEFAULT_VECTOR_CACHE_ENTRIES: usize = 100_000;

/// Default number of memory rows kept in memory (about 60 MB at 384 dimensions and short texts).
pub const DEFAULT_RECORD_CACHE_ENTRIES: usize = 20_000;

/// Most ids fetched in one `in (...)` list.
const FETCH_CHUNK: usize = 500;

/// The embedded [`VectorStore`] on one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    cache: Arc<VectorCache>,
    records: Arc<RecordCache>,
    /// Per-scope search indexes (bounded by the vector cache's size; see `index.rs`).
    indexes: Arc<ScopeIndexes<SqliteSource>>,
    turns: WriteTurns,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with the default vector cache size.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when the file cannot be opened or created.
    pub async fn open(path: &Path) -> Result<Self> {
        Self::open_with_cache(path, DEFAULT_VECTOR_CACHE_ENTRIES).await
    }

    /// Opens (creating if needed) the database at `path`, keeping at most `cache_entries`
    /// embeddings in memory for search.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when the file cannot be opened or created.
    pub async fn open_with_cache(path: &Path, cache_entries: usize) -> Result<Self> {
        Self::open_with_caches(path, cache_entries, DEFAULT_RECORD_CACHE_ENTRIES).await
    }

    /// Opens (creating if needed) the database at `path`, keeping at most `vector_entries`
    /// embeddings and `record_entries` memory rows in memory for search.
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when the file cannot be opened or created.
    pub async fn open_with_caches(path: &Path, vector_entries: usize, record_entries: usize) -> Result<Self> {
        let pool = open_sqlite(path, &MIGRATOR).await?;
        let indexes = Arc::new(ScopeIndexes::new(vector_entries, SqliteSource::new(pool.clone())));
        Ok(Self {
            pool,
            cache: Arc::new(VectorCache::new(vector_entries)),
            records: Arc::new(RecordCache::new(record_entries)),
            indexes,
            turns: WriteTurns::default(),
        })
    }

    /// Returns the embeddings of `ids`, from the cache or else from the database.
    async fn vectors(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<SharedVector>> {
        let generation = self.cache.generation();
        let (mut found, missing) = self.cache.get_many(ids);
        let loaded = self
            .rows_by_id(tenant, &missing, "id, embedding", |row| {
                let id: String = row.try_get("id")?;
                let bytes: &[u8] = row.try_get("embedding")?;
                let id = Uuid::parse_str(&id).map_err(|error| Error::Internal(format!("stored id {id}: {error}")))?;
                Ok((id, Arc::from(decode_embedding(bytes))))
            })
            .await?;
        self.cache.fill(&loaded, generation);
        found.extend(loaded);
        Ok(found)
    }

    /// `columns` of the rows of `tenant` with the given ids (those that exist), decoded by
    /// `decode`; read [`FETCH_CHUNK`] ids per statement. (`+tenant` keeps SQLite's planner on the
    /// primary key: with a plain `tenant = ?` it walks the tenant's whole index instead, 25 ms at
    /// 10k rows.)
    async fn rows_by_id<T>(
        &self,
        tenant: &str,
        ids: &[Uuid],
        columns: &str,
        decode: impl Fn(&sqlx::sqlite::SqliteRow) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut decoded = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(FETCH_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement = format!("select {columns} from memories where +tenant = ? and id in ({placeholders})");
            let mut fetch = sqlx::query(&statement).bind(tenant);
            for id in chunk {
                fetch = fetch.bind(id.to_string());
            }
            for row in fetch.fetch_all(&self.pool).await? {
                decoded.push(decode(&row)?);
            }
        }
        Ok(decoded)
    }
}

/// The memories a write changed, for the search indexes: inserts, updates and deletes with their
/// scope; relinked rows and rows whose state a key chain changed without.
fn changes(write: &WriteSet, applied: &Applied, restated: &[Uuid]) -> Vec<Change> {
    let known = write.insert.iter().chain(&write.update).chain(&applied.deleted).map(|record| Change {
        tenant: Some(record.tenant.clone()),
        id: record.id,
        scope: Some(record.scope.clone()),
    });
    let unknown = write.relink.iter().chain(restated).map(|id| Change { tenant: None, id: *id, scope: None });
    known.chain(unknown).collect()
}

/// Memories per upsert of the read log (4 parameters each).
const READS_PER_UPSERT: usize = 250;

/// The writers of one SQLite file take turns in-process before `BEGIN IMMEDIATE`. SQLite admits
/// one writer at a time anyway; waiting here is first come, first served and wakes the next
/// writer as soon as the lock is free, whereas SQLite's busy handler polls with sleeps of up to
/// 100 ms, and checkpoints get the gaps between transactions they need. Measured with four
/// concurrent verbatim writers into a user with 10,000 memories (`search_scale` benchmark):
/// p99 per add 80 ms → 19 ms, slowest 350 ms → 34 ms, write-ahead log 10–15 MB → 4–6 MB.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteTurns(Arc<tokio::sync::Mutex<()>>);

impl WriteTurns {
    /// Waits for this file's turn, then begins an immediate write transaction.
    pub(crate) async fn begin(&self, pool: &SqlitePool) -> Result<WriteTransaction> {
        let turn = Arc::clone(&self.0).lock_owned().await;
        let transaction = pool.begin_with("BEGIN IMMEDIATE").await?;
        Ok(WriteTransaction { transaction, _turn: turn })
    }
}

/// A write transaction holding its file's turn until it is committed or dropped (fields drop in
/// order: the transaction's rollback is queued before the turn passes on).
pub(crate) struct WriteTransaction {
    transaction: sqlx::Transaction<'static, sqlx::Sqlite>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl WriteTransaction {
    /// Commits, then passes the turn on.
    pub(crate) async fn commit(self) -> Result<()> {
        self.transaction.commit().await?;
        Ok(())
    }
}

impl std::ops::Deref for WriteTransaction {
    type Target = sqlx::SqliteConnection;

    fn deref(&self) -> &Self::Target {
        &self.transaction
    }
}

impl std::ops::DerefMut for WriteTransaction {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.transaction
    }
}

/// Write transactions start with `BEGIN IMMEDIATE`: a deferred transaction that reads first and
/// then writes fails at once with SQLITE_BUSY when another writer got there in between (the busy
/// timeout does not apply to that upgrade); an immediate one waits for the write lock instead.
///
/// Durability: WAL mode with `synchronous = NORMAL`. A committed transaction survives the
/// process being killed (`kill -9`, a crash: its pages are in the log, written before the
/// commit returns); after a power cut or an operating-system crash the last transactions before
/// it may be lost, never half-applied. `FULL` would fsync every commit for the power-cut case.
///
/// Opens (creating if needed) a SQLite database in WAL mode with a small pool and applies the
/// migrations of `migrator`. Shared by the embedded store and the history volume.
///
/// # Errors
/// [`Error::StoreUnavailable`] when the file or its directory cannot be opened or created.
pub(crate) async fn open_sqlite(path: &Path, migrator: &sqlx::migrate::Migrator) -> Result<SqlitePool> {
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|error| {
            Error::StoreUnavailable(format!("cannot create directory {}: {error}", parent.display()))
        })?;
    }
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await?;
    migrator
        .run(&pool)
        .await
        .map_err(|error| Error::StoreUnavailable(format!("migrations of {} failed: {error}", path.display())))?;
    Ok(pool)
}

fn bind_all<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    binds: &'q [Bind],
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    for bind in binds {
        query = match bind {
            Bind::Text(text) => query.bind(text.as_str()),
            Bind::Float(number) => query.bind(*number),
            Bind::Integer(number) => query.bind(*number),
            Bind::Time(at) => query.bind(at.timestamp_micros()),
            Bind::Date(date) => query.bind(date.format("%Y-%m-%d").to_string()),
            Bind::Uuid(id) => query.bind(id.to_string()),
        };
    }
    query
}

#[async_trait]
impl MemoryRows for SqliteStore {
    async fn apply(&self, write: &WriteSet) -> Result<Applied> {
        if !write.history.is_empty() || !write.messages.is_empty() {
            // The embedded store's history lives in the history volume, delivered through the
            // journal; a service assembled otherwise is a bug.
            return Err(Error::Internal("the SQLite store does not keep history; use the history volume".into()));
        }
        let mut transaction = self.turns.begin(&self.pool).await?;
        let (applied, restated) = apply_in(&mut transaction, write).await?;
        // Invalidated whatever the commit answers: a commit that reports an error may still have
        // happened, and dropping an unchanged row from a cache costs one read.
        let committed = transaction.commit().await;
        let changed = write.delete.iter().chain(write.update.iter().map(|record| &record.id));
        self.cache.invalidate(changed.clone().copied());
        // Rows whose state the key chains changed are cached rows too.
        self.records.invalidate(changed.chain(&restated).copied());
        self.indexes.source().record(changes(write, &applied, &restated));
        committed?;
        Ok(applied)
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<MemoryRecord>> {
        let row = sqlx::query(&format!("select {COLUMNS} from memories where tenant = ? and id = ?"))
            .bind(tenant)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(row_to_record).transpose()
    }

    /// From the row cache where there (rows of another tenant are left out as if missing), the
    /// rest from the database, then cached.
    async fn get_many(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<MemoryRecord>> {
        Ok(self.shared_many(tenant, ids).await?.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    /// Rows by id: in-process reads, nothing to share between a search's calls.
    async fn get_candidates(&self, query: &ScopedQuery, ids: &[Uuid]) -> Result<Vec<Arc<MemoryRecord>>> {
        self.shared_many(&query.tenant, ids).await
    }

    async fn list(&self, query: &ScopedQuery, after: Option<Cursor>, page_size: usize) -> Result<Page> {
        let (mut sql, mut binds) = where_clause(Sqlite, query, 1).into_parts();
        if let Some(cursor) = after {
            sql.push_str(" and (created_at < ? or (created_at = ? and id < ?))");
            binds.push(Bind::Integer(micros(cursor.created_at)));
            binds.push(Bind::Integer(micros(cursor.created_at)));
            binds.push(Bind::Text(cursor.id.to_string()));
        }
        let fetch = page_size + 1;
        let statement =
            format!("select {COLUMNS} from memories where {sql} order by created_at desc, id desc limit {fetch}");
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&self.pool).await?;
        Ok(Page::from_fetched(rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?, page_size))
    }

    async fn list_at(&self, query: &ScopedQuery, offset: usize, limit: usize) -> Result<Vec<MemoryRecord>> {
        let (sql, binds) = where_clause(Sqlite, query, 1).into_parts();
        let statement = format!(
            "select {COLUMNS} from memories where {sql} order by created_at desc, id desc limit {limit} offset {offset}"
        );
        let rows = bind_all(sqlx::query(&statement), &binds).fetch_all(&self.pool).await?;
        rows.iter().map(row_to_record).collect()
    }

    async fn count(&self, query: &ScopedQuery) -> Result<u64> {
        let (sql, binds) = where_clause(Sqlite, query, 1).into_parts();
        let statement = format!("select count(*) as total from memories where {sql}");
        let row = bind_all(sqlx::query(&statement), &binds).fetch_one(&self.pool).await?;
        let total: i64 = row.try_get("total")?;
        Ok(u64::try_from(total).unwrap_or_default())
    }

    async fn scopes(
        &self,
        tenant: &str,
        kind: ScopeKind,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ScopeSummary>> {
        let column = kind.column();
        let statement = format!(
            "select {column} as scope_id, count(*) as total, min(created_at) as first, max(updated_at) as last \
             from memories where tenant = ? and {column} is not null and {column} > ? \
             group by {column} order by {column} limit ?"
        );
        let rows = sqlx::query(&statement)
            .bind(tenant)
            .bind(after.unwrap_or(""))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let total: i64 = row.try_get("total")?;
                Ok(ScopeSummary {
                    kind,
                    id: row.try_get("scope_id")?,
                    total_memories: u64::try_from(total).unwrap_or_default(),
                    created_at: from_micros(row.try_get("first")?)?,
                    updated_at: from_micros(row.try_get("last")?)?,
                })
            })
            .collect()
    }

    async fn reset(&self, tenant: Option<&str>) -> Result<()> {
        let mut transaction = self.turns.begin(&self.pool).await?;
        match tenant {
            Some(tenant) => {
                sqlx::query("delete from keyword_postings where tenant = ?")
                    .bind(tenant)
                    .execute(&mut *transaction)
                    .await?;
                sqlx::query("delete from memories where tenant = ?").bind(tenant).execute(&mut *transaction).await?;
                sqlx::query("delete from memories_entities where tenant = ?")
                    .bind(tenant)
                    .execute(&mut *transaction)
                    .await?;
                sqlx::query("delete from history_journal where tenant = ?")
                    .bind(tenant)
                    .execute(&mut *transaction)
                    .await?;
            }
            None => {
                sqlx::query("delete from keyword_postings").execute(&mut *transaction).await?;
                sqlx::query("delete from memories").execute(&mut *transaction).await?;
                sqlx::query("delete from memories_entities").execute(&mut *transaction).await?;
                sqlx::query("delete from history_journal").execute(&mut *transaction).await?;
            }
        }
        let committed = transaction.commit().await;
        // Other tenants' entries stay valid, but a reset is rare: start afresh (whatever the
        // commit answered, as for every write).
        self.cache.clear();
        self.records.clear();
        self.indexes.clear();
        committed?;
        Ok(())
    }

    async fn unanalysed(&self, after: Option<Uuid>, limit: usize) -> Result<Vec<MemoryRecord>> {
        let rows =
            sqlx::query(&format!("select {COLUMNS} from memories where doc_len = 0 and id > ? order by id limit ?"))
                .bind(after.map(|id| id.to_string()).unwrap_or_default())
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(row_to_record).collect()
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query_scalar::<_, i64>("select 1").fetch_one(&self.pool).await?;
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn pool_status(&self) -> crate::metrics::PoolStatus {
        crate::metrics::PoolStatus::of(&self.pool)
    }
}

#[async_trait]
impl Journal for SqliteStore {
    async fn journal(&self, before: DateTime<Utc>, limit: usize) -> Result<Vec<JournalEntry>> {
        let rows = sqlx::query(
            "select id, tenant, memory_id, created_at, payload from history_journal where created_at < ? \
             order by created_at, id limit ?",
        )
        .bind(micros(before))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get("id")?;
                let memory_id: Option<String> = row.try_get("memory_id")?;
                let payload: String = row.try_get("payload")?;
                let bad = |what: &str| Error::Internal(format!("journal entry {id}: bad {what}"));
                Ok(JournalEntry {
                    id: Uuid::parse_str(&id).map_err(|_| bad("id"))?,
                    tenant: row.try_get("tenant")?,
                    memory_id: memory_id.map(|id| Uuid::parse_str(&id)).transpose().map_err(|_| bad("memory id"))?,
                    created_at: from_micros(row.try_get("created_at")?)?,
                    payload: serde_json::from_str(&payload).map_err(|_| bad("payload"))?,
                })
            })
            .collect()
    }

    async fn settle(&self, ids: &[Uuid]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut transaction = self.turns.begin(&self.pool).await?;
        settle_in(&mut transaction, ids).await?;
        transaction.commit().await?;
        Ok(())
    }
}

#[async_trait]
impl AccessLog for SqliteStore {
    async fn record_reads(&self, reads: &[MemoryRead]) -> Result<()> {
        let grouped = crate::store::grouped_reads(reads);
        if grouped.is_empty() {
            return Ok(());
        }
        let mut transaction = self.turns.begin(&self.pool).await?;
        // One statement per chunk (not one per memory); reads of memories deleted meanwhile, or
        // of another tenant's, join nothing.
        for chunk in grouped.chunks(READS_PER_UPSERT) {
            let rows = vec!["(?, ?, ?, ?)"; chunk.len()].join(", ");
            let statement = format!(
                "with r (id, tenant, at, n) as (values {rows}) \
                 insert into memory_reads (memory_id, tenant, last_read_at, reads) \
                 select m.id, m.tenant, r.at, r.n from r join memories m on m.id = r.id and m.tenant = r.tenant \
                 where true \
                 on conflict (memory_id) do update set last_read_at = max(last_read_at, excluded.last_read_at), \
                 reads = reads + excluded.reads"
            );
            let mut upsert = sqlx::query(&statement).persistent(chunk.len() == READS_PER_UPSERT);
            for (tenant, id, at, count) in chunk {
                upsert = upsert.bind(id.to_string()).bind(tenant).bind(micros(*at)).bind(count);
            }
            upsert.execute(&mut *transaction).await?;
        }
        transaction.commit().await?;
        Ok(())
    }

    async fn last_reads(&self, tenant: &str, ids: &[Uuid]) -> Result<HashMap<Uuid, DateTime<Utc>>> {
        let mut last = HashMap::new();
        for chunk in ids.chunks(FETCH_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement = format!(
                "select memory_id, last_read_at from memory_reads where tenant = ? and memory_id in ({placeholders})"
            );
            let mut fetch = sqlx::query(&statement).bind(tenant);
            for id in chunk {
                fetch = fetch.bind(id.to_string());
            }
            for row in fetch.fetch_all(&self.pool).await? {
                let id: String = row.try_get(0)?;
                last.insert(parse_id(&id)?, from_micros(row.try_get(1)?)?);
            }
        }
        Ok(last)
    }
}

#[async_trait]
impl VectorIndex for SqliteStore {
    async fn ensure_dimension(&self, dimension: usize, model_id: &str) -> Result<()> {
        let stored: Option<String> =
            sqlx::query_scalar("select value from store_meta where key = 'embedding_dimension'")
                .fetch_optional(&self.pool)
                .await?;
        match stored {
            Some(stored) if stored != dimension.to_string() => {
                let model: Option<String> =
                    sqlx::query_scalar("select value from store_meta where key = 'embedding_model'")
                        .fetch_optional(&self.pool)
                        .await?;
                Err(Error::Config(format!(
                    "the embedded store holds {stored}-dimensional embeddings (model {}) but the configured embedder \
                     {model_id} produces {dimension} dimensions; use the original embedder or a new data directory",
                    model.unwrap_or_else(|| "unknown".to_owned())
                )))
            }
            Some(_) => Ok(()),
            None => {
                let mut transaction = self.turns.begin(&self.pool).await?;
                sqlx::query(
                    "insert into store_meta (key, value) values ('embedding_dimension', ?), ('embedding_model', ?)",
                )
                .bind(dimension.to_string())
                .bind(model_id)
                .execute(&mut *transaction)
                .await?;
                transaction.commit().await?;
                Ok(())
            }
        }
    }

    async fn search(
        &self,
        query: &ScopedQuery,
        vector: &[f32],
        limit: usize,
        threshold: f32,
    ) -> Result<Vec<ScoredRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let index = self.indexes.fresh(query).await?;
        let best = match (&index, &query.filter) {
            (Some(slot), None) => slot.dense(query, vector, limit, threshold, None),
            _ => None,
        };
        let best = match (best, index) {
            (Some(best), _) => best,
            (None, index) => {
                let ids = self.visible_ids(query).await?;
                let from_index = index.and_then(|slot| slot.dense(query, vector, limit, threshold, Some(&ids)));
                match from_index {
                    Some(best) => best,
                    None => self.dense_from_database(query, &ids, vector, limit, threshold).await?,
                }
            }
        };
        if best.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = best.iter().map(|candidate| candidate.id).collect();
        let mut by_id: HashMap<Uuid, Arc<MemoryRecord>> =
            self.shared_many(&query.tenant, &ids).await?.into_iter().map(|record| (record.id, record)).collect();
        // A row deleted between the two reads is simply left out.
        Ok(best
            .into_iter()
            .filter_map(|candidate| {
                by_id.remove(&candidate.id).map(|record| ScoredRecord { record, score: candidate.score })
            })
            .collect())
    }
}

impl SqliteStore {
    /// The memories of `tenant` with the given ids (those that exist), shared with the row cache.
    async fn shared_many(&self, tenant: &str, ids: &[Uuid]) -> Result<Vec<Arc<MemoryRecord>>> {
        let generation = self.records.generation();
        let (found, missing) = self.records.get_many(ids);
        let mut records: Vec<Arc<MemoryRecord>> =
            found.into_iter().filter(|(_, record)| record.tenant == tenant).map(|(_, record)| record).collect();
        let loaded = self.rows_by_id(tenant, &missing, COLUMNS, |row| Ok(Arc::new(row_to_record(row)?))).await?;
        let entries: Vec<(Uuid, Arc<MemoryRecord>)> =
            loaded.iter().map(|record| (record.id, Arc::clone(record))).collect();
        self.records.fill(&entries, generation);
        records.extend(loaded);
        Ok(records)
    }

    /// The ids of the memories the query shows (its filter included).
    async fn visible_ids(&self, query: &ScopedQuery) -> Result<Vec<Uuid>> {
        let (sql, binds) = where_clause(Sqlite, query, 1).into_parts();
        // One row holding every matching id, run together (each is 36 characters): the driver's
        // per-row cost is paid once, and nothing needs quoting or unquoting (a JSON array of them
        // cost ~2 ms more at 10,000 memories).
        let statement = format!("select coalesce(group_concat(id, ''), '') from memories where {sql}");
        let ids_text: String = bind_all(sqlx::query(&statement), &binds).fetch_one(&self.pool).await?.try_get(0)?;
        concatenated_ids(&ids_text)
    }

    /// Dense search over `ids` with the embeddings from the vector cache or the database (scopes
    /// too large for an index).
    async fn dense_from_database(
        &self,
        query: &ScopedQuery,
        ids: &[Uuid],
        vector: &[f32],
        limit: usize,
        threshold: f32,
    ) -> Result<Vec<Candidate>> {
        let vectors = self.vectors(&query.tenant, ids).await?;
        let mut heap = BinaryHeap::with_capacity(limit + 1);
        for (id, stored) in &vectors {
            if stored.len() != vector.len() {
                continue;
            }
            // Vectors are unit length, so the dot product is the cosine; clip to [0, 1] like Mem0.
            let score = dot(stored, vector).clamp(0.0, 1.0);
            if score < threshold {
                continue;
            }
            heap.push(Candidate { score, id: *id });
            if heap.len() > limit {
                heap.pop();
            }
        }
        Ok(heap.into_sorted_vec())
    }

    /// Those of `ranked` (memories of the query's tenant) that the query shows: not expired (unless
    /// `show_expired`) and not superseded or retired (unless `include_superseded`). Read through
    /// the row cache: the retriever reads these rows next anyway.
    async fn live(
        &self,
        query: &ScopedQuery,
        ranked: &[(Uuid, Vec<usize>)],
    ) -> Result<std::collections::HashSet<Uuid>> {
        let ids: Vec<Uuid> = ranked.iter().map(|(id, _)| *id).collect();
        Ok(self
            .get_many(&query.tenant, &ids)
            .await?
            .into_iter()
            .filter(|record| {
                (query.show_expired || record.expiration_date.is_none_or(|date| date >= query.today))
                    && (query.include_superseded
                        || !matches!(record.state.status, MemoryStatus::Superseded | MemoryStatus::Retired))
            })
            .map(|record| record.id)
            .collect())
    }

    /// Memories in the query's scope and their total analysed length (kept by triggers).
    async fn scope_stats(&self, query: &ScopedQuery) -> Result<(u64, f64)> {
        let (sql, binds) = where_clause(Sqlite, &query.scope_only(), 1).into_parts();
        let statement =
            format!("select coalesce(sum(docs), 0), coalesce(sum(total_len), 0) from keyword_stats where {sql}");
        let row = bind_all(sqlx::query(&statement), &binds).fetch_one(&self.pool).await?;
        let docs: i64 = row.try_get(0)?;
        let total: i64 = row.try_get(1)?;
        let docs = u64::try_from(docs).unwrap_or(0);
        Ok((docs, if docs > 0 { total as f64 / docs as f64 } else { 0.0 }))
    }
}

#[async_trait]
impl KeywordIndex for SqliteStore {
    async fn keyword_candidates(
        &self,
        query: &ScopedQuery,
        terms: &[String],
        limit: usize,
    ) -> Result<KeywordCandidates> {
        if query.filter.is_none() {
            if let Some(slot) = self.indexes.fresh(query).await? {
                if let Some(found) = slot.keywords(query, terms, limit) {
                    return Ok(found);
                }
            }
        }
        let (doc_count, avg_doc_len) = self.scope_stats(query).await?;
        let mut stats = KeywordStats { doc_count, avg_doc_len, document_frequency: HashMap::new() };
        if doc_count == 0 || terms.is_empty() {
            return Ok(KeywordCandidates { stats, top: Vec::new() });
        }
        let term_list = vec!["?"; terms.len()].join(", ");
        // Each term is one range of the postings' primary key (tenant, term, user_id, …).
        let (scope_sql, scope_binds) = where_clause(Sqlite, &query.scope_only(), 1).into_parts();
        let statement = format!(
            "select term, count(*) from keyword_postings where {scope_sql} and term in ({term_list}) group by term"
        );
        let mut fetch = bind_all(sqlx::query(&statement), &scope_binds);
        for term in terms {
            fetch = fetch.bind(term);
        }
        for row in fetch.fetch_all(&self.pool).await? {
            let count: i64 = row.try_get(1)?;
            stats.document_frequency.insert(row.try_get(0)?, u64::try_from(count).unwrap_or(0));
        }
        if limit == 0 || stats.document_frequency.is_empty() {
            return Ok(KeywordCandidates { stats, top: Vec::new() });
        }
        // BM25 summed in SQL over the postings of the visible memories: only the best leave.
        let (weights, base, per_length) = Bm25::new(&stats, terms).sql_weights();
        let cases: String = weights.iter().map(|_| " when ? then ?").collect();
        let (visible_sql, visible_binds) = where_clause(Sqlite, &query.without_filter(), 1).into_parts();
        let (filtered, filter_binds) = match &query.filter {
            // A metadata filter is checked on the memory row itself.
            Some(_) => {
                let (sql, binds) = where_clause(Sqlite, query, 1).into_parts();
                (
                    format!(
                        " and exists (select 1 from memories where memories.id = keyword_postings.memory_id and {sql})"
                    ),
                    binds,
                )
            }
            None => (String::new(), Vec::new()),
        };
        let statement = format!(
            "select memory_id, sum((case term{cases} else 0 end) * tf / (tf + ? + ? * doc_len)) as score \
             from keyword_postings where {visible_sql} and term in ({term_list}){filtered} \
             group by memory_id order by score desc, memory_id limit ?"
        );
        let mut fetch = sqlx::query(&statement);
        for (term, weight) in &weights {
            fetch = fetch.bind(term.as_str()).bind(*weight);
        }
        fetch = bind_all(fetch.bind(base).bind(per_length), &visible_binds);
        for term in terms {
            fetch = fetch.bind(term);
        }
        let fetch = bind_all(fetch, &filter_binds).bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let top = fetch
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| {
                let id: String = row.try_get(0)?;
                let score: f64 = row.try_get(1)?;
                Ok((parse_id(&id)?, score))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KeywordCandidates { stats, top })
    }
}

/// Ids run together by `group_concat(id, '')`: hyphenated UUIDs of 36 characters each.
fn concatenated_ids(ids: &str) -> Result<Vec<Uuid>> {
    const ID_LEN: usize = 36;
    if !ids.len().is_multiple_of(ID_LEN) {
        return Err(Error::Internal(format!("id list of {} bytes", ids.len())));
    }
    ids.as_bytes()
        .chunks_exact(ID_LEN)
        .map(|id| Uuid::try_parse_ascii(id).map_err(|error| Error::Internal(format!("stored id: {error}"))))
        .collect()
}

fn parse_id(id: &str) -> Result<Uuid> {
    Uuid::parse_str(id).map_err(|error| Error::Internal(format!("stored id {id}: {error}")))
}

/// `with m(entity_id, probe[, weight]) as (values …)` for matched entity rows.
fn matched_values(matched: &[(String, Vec<usize>)], weights: Option<&[f64]>) -> String {
    let row = if weights.is_some() { "(?, ?, ?)" } else { "(?, ?)" };
    let count: usize = matched.iter().map(|(_, probes)| probes.len()).sum();
    let columns = if weights.is_some() { "entity_id, probe, weight" } else { "entity_id, probe" };
    format!("with m({columns}) as (values {})", vec![row; count].join(", "))
}

fn bind_matched<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    matched: &'q [(String, Vec<usize>)],
    weights: Option<&[f64]>,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    for (id, probes) in matched {
        for probe in probes {
            query = query.bind(id.as_str()).bind(i64::try_from(*probe).unwrap_or(i64::MAX));
            if let Some(weights) = weights {
                query = query.bind(weights.get(*probe).copied().unwrap_or(0.0));
            }
        }
    }
    query
}

fn parse_probes(list: &str) -> Vec<usize> {
    let mut probes: Vec<usize> = list.split(',').filter_map(|probe| probe.trim().parse().ok()).collect();
    probes.sort_unstable();
    probes.dedup();
    probes
}

#[async_trait]
impl EntityIndex for SqliteStore {
    async fn entity_candidates(
        &self,
        query: &ScopedQuery,
        probes: &[EntityProbe],
        threshold: f32,
        limit: usize,
    ) -> Result<EntityCandidates> {
        let mut found = EntityCandidates { linked: vec![0; probes.len()], ..EntityCandidates::default() };
        if probes.is_empty() {
            return Ok(found);
        }
        if query.filter.is_none() {
            if let Some(slot) = self.indexes.fresh(query).await? {
                if let Some(found) = slot.entities(query, probes, threshold, limit) {
                    return Ok(found);
                }
            }
        }
        let mut connection = self.pool.acquire().await?;
        for (id, normalized, embedding) in scope_entities(&mut connection, &query.tenant, &query.scope, false).await? {
            let matching = matching_probes(probes, &normalized, &embedding, threshold);
            if !matching.is_empty() {
                found.matched.push((id, matching));
            }
        }
        cap_matched(&mut found.matched);
        if found.matched.is_empty() {
            return Ok(found);
        }
        drop(connection);
        // Entity rows are per scope: their links are the scope's memories. With the scope's size.
        let values = matched_values(&found.matched, None);
        let (scope_sql, scope_binds) = where_clause(Sqlite, &query.scope_only(), 1).into_parts();
        let statement = format!(
            "{values} select m.probe, count(distinct l.memory_id), \
             (select coalesce(sum(docs), 0) from keyword_stats where {scope_sql}) from m \
             join memory_entity_links l on l.entity_id = m.entity_id group by m.probe"
        );
        let fetch = bind_all(bind_matched(sqlx::query(&statement), &found.matched, None), &scope_binds);
        let mut doc_count = 0;
        for row in fetch.fetch_all(&self.pool).await? {
            let probe: i64 = row.try_get(0)?;
            let count: i64 = row.try_get(1)?;
            doc_count = u64::try_from(row.try_get::<i64, _>(2)?).unwrap_or(0);
            if let Some(slot) = usize::try_from(probe).ok().and_then(|probe| found.linked.get_mut(probe)) {
                *slot = u64::try_from(count).unwrap_or(0);
            }
        }
        if limit == 0 {
            return Ok(found);
        }
        let weights = EntityScores::weights(&found.linked, doc_count);
        let values = matched_values(&found.matched, Some(&weights));
        // Ranked by the summed weights of the links (a memory linked to two rows one probe matches
        // counts that probe twice here, once in its score). With a metadata filter each link is
        // checked on its memory row; otherwise only expiration and supersession can hide a memory
        // of the scope, checked afterwards on a few more rows than needed.
        let (join, filter_sql, filter_binds) = match &query.filter {
            Some(_) => {
                let (sql, binds) = where_clause(Sqlite, query, 1).into_parts();
                (" cross join memories on memories.id = l.memory_id", format!(" where {sql}"), binds)
            }
            None => ("", String::new(), Vec::new()),
        };
        let statement = format!(
            "{values} select l.memory_id, sum(m.weight) as score, group_concat(m.probe) from m \
             join memory_entity_links l on l.entity_id = m.entity_id{join}{filter_sql} \
             group by l.memory_id order by score desc, l.memory_id desc limit ?"
        );
        let check_live = query.filter.is_none() && (!query.show_expired || !query.include_superseded);
        // Without the check one pass; with it, passes of 2, 8, 32… × limit until enough live
        // memories are found or the links are exhausted.
        let mut fetch_limit = if check_live { limit * 2 } else { limit };
        let ranked = loop {
            let fetch = bind_matched(sqlx::query(&statement), &found.matched, Some(&weights));
            let fetch = bind_all(fetch, &filter_binds).bind(i64::try_from(fetch_limit).unwrap_or(i64::MAX));
            let mut ranked: Vec<(Uuid, Vec<usize>)> = Vec::new();
            for row in fetch.fetch_all(&self.pool).await? {
                let id: String = row.try_get(0)?;
                let probes: String = row.try_get(2)?;
                ranked.push((parse_id(&id)?, parse_probes(&probes)));
            }
            let exhausted = ranked.len() < fetch_limit;
            if check_live {
                let live = self.live(query, &ranked).await?;
                ranked.retain(|(id, _)| live.contains(id));
            }
            if !check_live || ranked.len() >= limit || exhausted {
                ranked.truncate(limit);
                break ranked;
            }
            fetch_limit = fetch_limit.saturating_mul(4);
        };
        found.hits = ranked
            .into_iter()
            .flat_map(|(memory_id, probes)| probes.into_iter().map(move |probe| EntityHit { memory_id, probe }))
            .collect();
        Ok(found)
    }

    async fn entity_links(
        &self,
        query: &ScopedQuery,
        matched: &[(String, Vec<usize>)],
        memory_ids: &[Uuid],
    ) -> Result<Vec<EntityHit>> {
        let mut hits = Vec::new();
        if matched.is_empty() {
            return Ok(hits);
        }
        // The index holds every link of the scope (a filter narrows memories, not links).
        if let Some(slot) = self.indexes.fresh(query).await? {
            if let Some(hits) = slot.links_of(matched, memory_ids) {
                return Ok(hits);
            }
        }
        let values = matched_values(matched, None);
        for chunk in memory_ids.chunks(FETCH_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement = format!(
                "{values} select l.memory_id, m.probe from m join memory_entity_links l on l.entity_id = m.entity_id \
                 where l.memory_id in ({placeholders})"
            );
            let mut fetch = bind_matched(sqlx::query(&statement), matched, None);
            for id in chunk {
                fetch = fetch.bind(id.to_string());
            }
            for row in fetch.fetch_all(&self.pool).await? {
                let id: String = row.try_get(0)?;
                let probe: i64 = row.try_get(1)?;
                hits.push(EntityHit { memory_id: parse_id(&id)?, probe: usize::try_from(probe).unwrap_or(usize::MAX) });
            }
        }
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenated_ids_split_every_36_characters() {
        assert_eq!(concatenated_ids("").expect("empty"), Vec::<Uuid>::new());
        let ids = [Uuid::now_v7(), Uuid::now_v7(), Uuid::nil()];
        let text: String = ids.iter().map(Uuid::to_string).collect();
        assert_eq!(concatenated_ids(&text).expect("ids"), ids);
        assert!(concatenated_ids(&text[1..]).is_err(), "a cut list is an error, not a shifted one");
    }
}
